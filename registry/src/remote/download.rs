//! Downloads over HTTP with resume: [`HttpRemote`] as a [`Remote`], one GET attempt
//! (caps, Range resume, the minimum speed) and the loop that retries it, into a staging
//! file or into memory.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use headers::{ContentRange, HeaderMapExt, Range};
use reqwest::StatusCode;
use reqwest::blocking::Response;
use reqwest::header::{CONTENT_LENGTH, HeaderMap};

use super::retry::{
    Attempt, AttemptError, GaveUp, body_text, is_transient_status, read_failure, retry_after,
    retrying, transient,
};
use super::{Fetched, HttpRemote, Remote};
use crate::error::{Error, Failure, Result};

/// How one attempt ended.
enum Outcome {
    Done,
    Missing,
    /// The partial file cannot be continued (the server changed or ignored the range):
    /// start again from zero at once.
    Restart,
}

impl HttpRemote {
    fn attempt(
        &self,
        url: &reqwest::Url,
        cap: u64,
        sink: &mut dyn Sink,
        whole: bool,
        stats: &mut Fetched,
    ) -> std::result::Result<Outcome, AttemptError> {
        let mut have = if whole { 0 } else { sink.existing() };
        if have >= cap {
            have = 0;
        }
        let mut req = self.client.get(url.clone());
        if let Some(t) = &self.opts.bearer_token {
            req = req.bearer_auth(t);
        }
        if have > 0 {
            let mut range = HeaderMap::new();
            range.typed_insert(Range::bytes(have..).expect("a start and no end is a valid range"));
            req = req.headers(range);
        }
        let mut resp = req.send().map_err(|e| transient(&e, &self.opts))?;
        let status = resp.status();
        let total = match status {
            StatusCode::NOT_FOUND | StatusCode::GONE => return Ok(Outcome::Missing),
            StatusCode::OK => {
                have = 0;
                content_length(&resp)
            }
            StatusCode::PARTIAL_CONTENT => match resp.headers().typed_get::<ContentRange>() {
                Some(cr) if cr.bytes_range().is_some_and(|(start, _)| start == have) => {
                    cr.bytes_len()
                }
                _ => return Ok(Outcome::Restart),
            },
            StatusCode::RANGE_NOT_SATISFIABLE => {
                // `bytes */N`: the partial file is complete when it is exactly N bytes.
                return match unsatisfied_len(resp.headers()) {
                    Some(n) if n == have && have > 0 => {
                        stats.resumed = have;
                        Ok(Outcome::Done)
                    }
                    _ => Ok(Outcome::Restart),
                };
            }
            s if is_transient_status(s) => {
                return Err(AttemptError::Transient(
                    Failure::Status(s.as_u16()),
                    retry_after(resp.headers()),
                ));
            }
            s => {
                return Err(AttemptError::Permanent(Error::Status {
                    url: url.to_string(),
                    status: s.as_u16(),
                    message: body_text(resp),
                }));
            }
        };
        let path = sink.describe();
        let io = |e: std::io::Error| AttemptError::Permanent(Error::io(&path, e));
        sink.start(have).map_err(io)?;
        stats.resumed = have;

        let mut got = have;
        let mut buf = vec![0u8; 64 * 1024];
        let mut window = (Instant::now(), 0u64);
        while got < cap {
            let want = usize::try_from(cap - got)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = match resp.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(AttemptError::Transient(read_failure(&e, &self.opts), None)),
            };
            sink.write(&buf[..n]).map_err(io)?;
            got += n as u64;
            stats.transferred += n as u64;
            window.1 += n as u64;
            if let Some(ms) = self.opts.min_speed {
                let secs = window.0.elapsed();
                if secs >= ms.window {
                    if (window.1 as f64) < ms.bytes_per_sec as f64 * secs.as_secs_f64() {
                        return Err(AttemptError::Transient(
                            Failure::TooSlow {
                                bytes: window.1,
                                secs: secs.as_secs_f64(),
                                min_rate: ms.bytes_per_sec,
                            },
                            None,
                        ));
                    }
                    window = (Instant::now(), 0);
                }
            }
        }
        if let Some(total) = total
            && got < cap
            && got < total
        {
            return Err(AttemptError::Transient(
                Failure::Truncated {
                    got,
                    expected: total,
                },
                None,
            ));
        }
        sink.finish().map_err(io)?;
        Ok(Outcome::Done)
    }

    /// GETs `path` with retries into `sink`, reading at most `max + 1` bytes; resumes what
    /// the sink holds when `resume`.
    fn get_into(&self, path: &str, max: u64, sink: &mut dyn Sink, resume: bool) -> Result<Fetched> {
        let url = self.url_of(path)?;
        let cap = max.saturating_add(1);
        let mut stats = Fetched::default();
        let mut whole = !resume;
        // Attempts that started over without a failure to retry (an inconsistent range
        // answer): not counted as retries.
        let mut restarts = 0u32;
        let done = retrying(&self.opts, |_| {
            match self.attempt(&url, cap, sink, whole, &mut stats) {
                Ok(Outcome::Done) => Attempt::Done(true),
                Ok(Outcome::Missing) => Attempt::Done(false),
                Ok(Outcome::Restart) => {
                    whole = true;
                    restarts += 1;
                    Attempt::Again(Failure::Other(
                        "the server answered a range request inconsistently".into(),
                    ))
                }
                Err(AttemptError::Permanent(e)) => Attempt::Permanent(e),
                Err(AttemptError::Transient(failure, retry_after)) => {
                    Attempt::Transient(failure, retry_after)
                }
            }
        });
        match done {
            Ok((found, attempts)) => {
                stats.found = found;
                stats.retries = attempts - 1 - restarts;
                Ok(stats)
            }
            Err(GaveUp::Permanent(e)) => Err(e),
            Err(GaveUp::Exhausted(failure, attempts)) => Err(Error::Transfer {
                url: url.to_string(),
                attempts,
                failure,
            }),
        }
    }

    /// Reads `path` into memory: `None` when absent, else at most `max + 1` bytes (the
    /// [`cuda_aot::source::RegistrySource`] contract), with the same timeouts and retries.
    pub fn get(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let mut sink = MemSink(Vec::new());
        let f = self.get_into(path, max, &mut sink, false)?;
        Ok(f.found.then_some(sink.0))
    }
}

/// Where a download goes: a staging file (resumable) or memory.
trait Sink {
    /// Bytes already held from an earlier attempt.
    fn existing(&self) -> u64;
    /// Keeps the first `keep` bytes and positions after them.
    fn start(&mut self, keep: u64) -> std::io::Result<()>;
    /// Appends.
    fn write(&mut self, b: &[u8]) -> std::io::Result<()>;
    /// Makes the bytes durable.
    fn finish(&mut self) -> std::io::Result<()>;
    /// For messages.
    fn describe(&self) -> std::path::PathBuf;
}

struct FileSink<'a> {
    path: &'a Path,
    file: Option<File>,
}

impl Sink for FileSink<'_> {
    fn existing(&self) -> u64 {
        fs::metadata(self.path).map(|m| m.len()).unwrap_or(0)
    }
    fn start(&mut self, keep: u64) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(self.path)?;
        f.set_len(keep)?;
        f.seek(SeekFrom::Start(keep))?;
        self.file = Some(f);
        Ok(())
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(b),
            None => Err(std::io::Error::other("sink not started")),
        }
    }
    fn finish(&mut self) -> std::io::Result<()> {
        match self.file.take() {
            Some(f) => f.sync_all(),
            None => Ok(()),
        }
    }
    fn describe(&self) -> std::path::PathBuf {
        self.path.to_path_buf()
    }
}

struct MemSink(Vec<u8>);

impl Sink for MemSink {
    fn existing(&self) -> u64 {
        self.0.len() as u64
    }
    fn start(&mut self, keep: u64) -> std::io::Result<()> {
        self.0.truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        Ok(())
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.0.extend_from_slice(b);
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> std::path::PathBuf {
        "<memory>".into()
    }
}

impl Remote for HttpRemote {
    fn fetch(&self, path: &str, max: u64, dest: &Path, resume: bool) -> Result<Fetched> {
        let mut sink = FileSink {
            path: dest,
            file: None,
        };
        let f = self.get_into(path, max, &mut sink, resume)?;
        if !f.found {
            let _ = fs::remove_file(dest);
        }
        Ok(f)
    }

    fn describe(&self) -> String {
        self.base.to_string()
    }
}

fn content_length(resp: &Response) -> Option<u64> {
    resp.headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The length a 416 states in `Content-Range: bytes */LEN` (read by the `headers` crate);
/// `None` when absent, unreadable, or stating a range.
fn unsatisfied_len(headers: &HeaderMap) -> Option<u64> {
    let cr = headers.typed_get::<ContentRange>()?;
    cr.bytes_range().map_or(cr.bytes_len(), |_| None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_416_states_the_length_and_no_range() {
        use reqwest::header::{CONTENT_RANGE, HeaderValue};
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_RANGE, HeaderValue::from_str(v).unwrap());
            unsatisfied_len(&h)
        };
        assert_eq!(with("bytes */100"), Some(100));
        assert_eq!(with("bytes */0"), Some(0));
        assert_eq!(with("bytes 0-9/100"), None, "a range is no 416 answer");
        assert_eq!(with("bytes */*"), None);
        assert_eq!(with("items */100"), None);
        assert_eq!(with("bytes */ten"), None);
        assert_eq!(unsatisfied_len(&HeaderMap::new()), None);
    }
}
