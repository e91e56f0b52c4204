//! Publishing over HTTP, client side: the [`Store`] the publish algorithm writes through
//! when the registry is a `cuda-aot-registry serve --publish-token-file` server. Reads are
//! plain GETs; writes are PUTs with the bearer token and the conditions that keep the
//! directory store's guarantees: `If-None-Match: *` for roots and the next index,
//! `If-Match` with the strong ETag (blake3) of the timestamp a publish was prepared on.

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, IF_MATCH, IF_NONE_MATCH};

use cuda_aot::Digest;
use cuda_aot::source::{RegistrySource, layout};

use crate::error::{Error, Result};
use crate::publish::{Commit, Store};
use crate::remote::{HttpOptions, HttpRemote};

/// A registry served by a publishing `cuda-aot-registry serve`.
pub struct HttpStore {
    source: HttpSource,
}

/// Reads of an [`HttpStore`]: each file fetched into memory with the remote's caps,
/// timeouts and retries.
struct HttpSource {
    remote: HttpRemote,
}

impl RegistrySource for HttpSource {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        self.remote.get(path, max).map_err(|e| e.into_core(path))
    }

    fn describe(&self) -> String {
        self.remote.describe_url()
    }
}

/// How a PUT's conditions are written.
enum Condition {
    /// No condition (content-addressed files: the same name is the same bytes).
    None,
    /// `If-None-Match: *`.
    Absent,
    /// `If-Match: "<blake3 hex>"`.
    Is(Digest),
}

impl HttpStore {
    /// The registry at `url`, publishing with `token` (sent as a bearer token).
    pub fn new(url: &str, token: &str, http: HttpOptions) -> Result<Self> {
        let remote = HttpRemote::new(
            url,
            HttpOptions {
                bearer_token: Some(token.to_string()),
                ..http
            },
        )?;
        Ok(HttpStore {
            source: HttpSource { remote },
        })
    }

    fn remote(&self) -> &HttpRemote {
        &self.source.remote
    }

    /// PUTs `bytes` to `rel` and returns the status and the server's text.
    fn put(&self, rel: &str, bytes: &[u8], cond: Condition) -> Result<(StatusCode, String)> {
        let url = self.remote().url_of(rel)?;
        let content_type = if rel.ends_with(".json") {
            "application/json"
        } else {
            "application/octet-stream"
        };
        let body = bytes.to_vec();
        let (resp, _retries) = self.remote().send_with_retries(&url, &|c| {
            let r = c
                .put(url.clone())
                .header(CONTENT_TYPE, content_type)
                .body(body.clone());
            match &cond {
                Condition::None => r,
                Condition::Absent => r.header(IF_NONE_MATCH, "*"),
                Condition::Is(d) => r.header(IF_MATCH, format!("\"{}\"", d.hex())),
            }
        })?;
        let status = resp.status();
        Ok((status, crate::remote::body_text(resp)))
    }

    fn refused(&self, rel: &str, status: StatusCode, text: String) -> Error {
        Error::Status {
            url: format!("{}{rel}", self.remote().describe_url()),
            status: status.as_u16(),
            message: text,
        }
    }

    /// Whether the server's `timestamp.json` is exactly `bytes` (a retried commit whose
    /// first attempt went through).
    fn timestamp_is(&self, bytes: &[u8]) -> bool {
        self.remote()
            .get(layout::TIMESTAMP, bytes.len() as u64)
            .is_ok_and(|b| b.as_deref() == Some(bytes))
    }

    fn put_timestamp(
        &self,
        bytes: &[u8],
        base: Option<Digest>,
        c: Option<&Commit<'_>>,
    ) -> Result<()> {
        let cond = match base {
            Some(d) => Condition::Is(d),
            None => Condition::Absent,
        };
        let (status, text) = self.put(layout::TIMESTAMP, bytes, cond)?;
        match status {
            s if s.is_success() => Ok(()),
            StatusCode::PRECONDITION_FAILED if self.timestamp_is(bytes) => Ok(()),
            StatusCode::PRECONDITION_FAILED => Err(Error::Conflict {
                version: c.map_or(0, |c| c.version),
                base: c.map_or(0, |c| c.base),
            }),
            s => Err(self.refused(layout::TIMESTAMP, s, text)),
        }
    }
}

impl Store for HttpStore {
    fn source(&self) -> &dyn RegistrySource {
        &self.source
    }

    fn put_content(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        let (status, text) = self.put(rel, bytes, Condition::None)?;
        match status {
            StatusCode::CREATED => Ok(true),
            s if s.is_success() => Ok(false),
            s => Err(self.refused(rel, s, text)),
        }
    }

    fn put_root(&self, version: u64, bytes: &[u8]) -> Result<()> {
        let rel = layout::root(version);
        let (status, text) = self.put(&rel, bytes, Condition::Absent)?;
        match status {
            s if s.is_success() => Ok(()),
            StatusCode::CONFLICT => Err(Error::RootConflict {
                path: format!("{}{rel}", self.remote().describe_url()).into(),
                version,
            }),
            s => Err(self.refused(&rel, s, text)),
        }
    }

    fn commit(&self, c: &Commit<'_>) -> Result<()> {
        // The index is staged by the server (created only if absent: 412 when another
        // publisher committed this version), then the timestamp commits both.
        let (status, text) = self.put(&c.index_rel, c.index, Condition::Absent)?;
        match status {
            s if s.is_success() => {}
            StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT => {
                return Err(Error::Conflict {
                    version: c.version,
                    base: c.base,
                });
            }
            s => return Err(self.refused(&c.index_rel, s, text)),
        }
        self.put_timestamp(c.timestamp, c.base_timestamp, Some(c))
    }

    fn replace_timestamp(&self, bytes: &[u8], base_timestamp: Option<Digest>) -> Result<()> {
        self.put_timestamp(bytes, base_timestamp, None)
    }

    fn describe(&self) -> String {
        self.remote().describe_url()
    }
}
