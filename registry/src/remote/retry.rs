//! The one retry loop of every transfer ([`retrying`]: HTTP downloads with resume, a
//! publish's PUT, OCI pulls and pushes), which failures of an HTTP exchange are transient
//! or permanent, how long a server asks to wait (`Retry-After`), the texts that describe a
//! failure, and the retrying send of one request.

use std::io::Read;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use reqwest::header::RETRY_AFTER;

use super::{HttpOptions, HttpRemote};
use crate::error::{Error, Failure, Result};

/// Why one attempt failed.
pub(super) enum AttemptError {
    Transient(Failure, Option<Duration>),
    Permanent(Error),
}

/// What one attempt of a transfer came to, for [`retrying`].
pub(crate) enum Attempt<T, E> {
    /// It is over: succeeded, or ended in a way that is no failure (a missing file).
    Done(T),
    /// It failed in a way a later attempt may not (connection, timeout, 408/429/5xx): the
    /// failure, and the wait the server asked for (`Retry-After`).
    Transient(Failure, Option<Duration>),
    /// Start over at once, without waiting (a server that answered a range request
    /// inconsistently): an attempt, not a retry after a failure.
    Again(Failure),
    /// It failed for good.
    Permanent(E),
}

/// How [`retrying`] gave up.
pub(crate) enum GaveUp<E> {
    /// An attempt failed for good.
    Permanent(E),
    /// Every attempt the options allow failed: the last failure, and how many were made.
    Exhausted(Failure, u32),
}

/// The one retry loop of every transfer: runs `attempt` with its number (from 1) until it
/// is done, fails for good, or the attempts of `opts` are spent, waiting the policy's
/// backoff ([`HttpOptions::backoff_for`], a server's `Retry-After` honoured and capped)
/// after a transient failure. `Ok` holds the value and the number of attempts made.
pub(crate) fn retrying<T, E>(
    opts: &HttpOptions,
    mut attempt: impl FnMut(u32) -> Attempt<T, E>,
) -> std::result::Result<(T, u32), GaveUp<E>> {
    let mut n = 0u32;
    loop {
        n += 1;
        let (failure, wait) = match attempt(n) {
            Attempt::Done(v) => return Ok((v, n)),
            Attempt::Permanent(e) => return Err(GaveUp::Permanent(e)),
            Attempt::Transient(f, retry_after) => (f, Some(retry_after)),
            Attempt::Again(f) => (f, None),
        };
        if n >= opts.attempts.max(1) {
            return Err(GaveUp::Exhausted(failure, n));
        }
        if let Some(retry_after) = wait {
            std::thread::sleep(opts.backoff_for(n, retry_after));
        }
    }
}

impl HttpRemote {
    /// Sends one request built by `make` (a PUT of a publish), retrying transient failures
    /// (connection errors, timeouts, 408/429/5xx) with backoff; returns the final response
    /// whatever its status.
    pub fn send_with_retries(
        &self,
        url: &reqwest::Url,
        make: &dyn Fn(&Client) -> reqwest::blocking::RequestBuilder,
    ) -> Result<(Response, u32)> {
        let sent = retrying(&self.opts, |_| {
            let mut req = make(&self.client);
            if let Some(t) = &self.opts.bearer_token {
                req = req.bearer_auth(t);
            }
            match req.send() {
                Ok(r) if is_transient_status(r.status()) => Attempt::Transient(
                    Failure::Status(r.status().as_u16()),
                    retry_after(r.headers()),
                ),
                Ok(r) => Attempt::Done(r),
                Err(e) => match transient(&e, &self.opts) {
                    AttemptError::Transient(f, ra) => Attempt::Transient(f, ra),
                    AttemptError::Permanent(e) => Attempt::Permanent(e),
                },
            }
        });
        match sent {
            Ok((r, attempts)) => Ok((r, attempts - 1)),
            Err(GaveUp::Permanent(e)) => Err(e),
            Err(GaveUp::Exhausted(failure, attempts)) => Err(Error::Transfer {
                url: url.to_string(),
                attempts,
                failure,
            }),
        }
    }
}

/// A server's `Retry-After` as a wait from now, in either of its forms (RFC 9110 10.2.3:
/// delay-seconds, or an HTTP-date, read by the `headers` crate's date parser); a date in
/// the past is no wait. `None` when absent or unreadable. [`HttpOptions::backoff_for`]
/// caps it.
pub(super) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    use headers::Header as _;
    let value = headers.get(RETRY_AFTER)?;
    if let Some(secs) = value
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        return Some(Duration::from_secs(secs));
    }
    let date = headers::Date::decode(&mut std::iter::once(value)).ok()?;
    let at = std::time::SystemTime::from(date);
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// 408, 425, 429 and the 5xx that a retry can outlast.
pub(crate) fn is_transient_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 408 | 425 | 429 | 500 | 502 | 503 | 504)
}

pub(super) fn transient(e: &reqwest::Error, opts: &HttpOptions) -> AttemptError {
    let failure = if e.is_timeout() {
        Failure::Timeout {
            secs: opts.read_timeout.as_secs(),
        }
    } else if e.is_connect() {
        Failure::Connect(root_cause(e))
    } else {
        Failure::Other(root_cause(e))
    };
    AttemptError::Transient(failure, None)
}

pub(super) fn read_failure(e: &std::io::Error, opts: &HttpOptions) -> Failure {
    let timed_out = e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|i| i.downcast_ref::<reqwest::Error>())
            .is_some_and(|r| r.is_timeout());
    if timed_out {
        Failure::Timeout {
            secs: opts.read_timeout.as_secs(),
        }
    } else {
        Failure::Other(root_cause(e))
    }
}

/// The innermost error message (reqwest wraps hyper wraps io).
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The text of a (short) response body: at most 2 KiB of it, trimmed.
pub(crate) fn body_text(resp: Response) -> String {
    let mut buf = Vec::new();
    let _ = resp.take(2048).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one loop: transient failures retried up to the attempts allowed, a permanent
    /// one stops at once, a start-over counts as an attempt, the value carries the count.
    #[test]
    fn retrying_retries_transient_failures_up_to_the_attempts_and_stops_on_permanent_ones() {
        let opts = HttpOptions {
            attempts: 3,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            ..HttpOptions::default()
        };
        let mut seen = Vec::new();
        let r: std::result::Result<(&str, u32), GaveUp<()>> = retrying(&opts, |n| {
            seen.push(n);
            match n {
                1 => Attempt::Transient(Failure::Status(503), None),
                2 => Attempt::Again(Failure::Other("range".into())),
                _ => Attempt::Done("ok"),
            }
        });
        assert!(matches!(r, Ok(("ok", 3))));
        assert_eq!(seen, [1, 2, 3]);
        let r: std::result::Result<((), u32), GaveUp<()>> =
            retrying(&opts, |_| Attempt::Transient(Failure::Status(500), None));
        assert!(matches!(r, Err(GaveUp::Exhausted(Failure::Status(500), 3))));
        let mut calls = 0;
        let r: std::result::Result<((), u32), GaveUp<&str>> = retrying(&opts, |_| {
            calls += 1;
            Attempt::Permanent("denied")
        });
        assert!(matches!(r, Err(GaveUp::Permanent("denied"))));
        assert_eq!(calls, 1);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
            retry_after(&h)
        };
        assert_eq!(with("120"), Some(Duration::from_secs(120)));
        assert_eq!(with(" 7 "), Some(Duration::from_secs(7)));
        let later = std::time::SystemTime::now() + Duration::from_secs(90);
        let date = httpdate_of(later);
        let wait = with(&date).expect("an HTTP-date is read");
        assert!(
            wait > Duration::from_secs(80) && wait <= Duration::from_secs(90),
            "{date}: {wait:?}"
        );
        assert_eq!(with("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    /// `t` as an HTTP-date (IMF-fixdate), written through the `headers` crate.
    fn httpdate_of(t: std::time::SystemTime) -> String {
        use headers::Header as _;
        let mut values = Vec::new();
        headers::Date::from(t).encode(&mut values);
        values[0].to_str().unwrap().to_string()
    }
}
