//! The transport settings of [`HttpRemote`](super::HttpRemote): timeouts, the minimum
//! transfer speed, attempts and backoff (with jitter, honouring a server's `Retry-After`),
//! the bearer token and its redacted `Debug`.

use std::time::Duration;

use crate::defaults::http as defaults;

/// A minimum transfer rate: a download that receives fewer than `bytes_per_sec` on average
/// over a whole `window` is failed (and retried), like curl's `--speed-limit/--speed-time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinSpeed {
    /// The minimum average rate.
    pub bytes_per_sec: u64,
    /// The window over which it is averaged.
    pub window: Duration,
}

/// Transport settings of [`HttpRemote`](super::HttpRemote). Its `Debug` shows `<redacted>`
/// for the bearer token, so options can be logged.
#[derive(Clone)]
pub struct HttpOptions {
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Time allowed without receiving anything (response headers or body bytes).
    pub read_timeout: Duration,
    /// Refuse a trickle: fail a transfer slower than this (None: no minimum).
    pub min_speed: Option<MinSpeed>,
    /// Attempts per file before giving up (1: no retry).
    pub attempts: u32,
    /// Wait before the first retry; doubles on each retry (with jitter).
    pub backoff: Duration,
    /// The longest wait between attempts (also caps a server's `Retry-After`).
    pub max_backoff: Duration,
    /// A bearer token sent with every request (publishing; reads need none).
    pub bearer_token: Option<String>,
    /// Send the bearer token over plain `http://` to a host other than this machine.
    /// Refused by default ([`Error::TokenInClear`](crate::Error::TokenInClear)): anyone on
    /// the path could read it.
    pub allow_plain_http: bool,
}

/// What `Debug` shows in place of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field, the token as `<redacted>` (never its text, nor its length).
        let HttpOptions {
            connect_timeout,
            read_timeout,
            min_speed,
            attempts,
            backoff,
            max_backoff,
            bearer_token,
            allow_plain_http,
        } = self;
        f.debug_struct("HttpOptions")
            .field("connect_timeout", connect_timeout)
            .field("read_timeout", read_timeout)
            .field("min_speed", min_speed)
            .field("attempts", attempts)
            .field("backoff", backoff)
            .field("max_backoff", max_backoff)
            .field("bearer_token", &bearer_token.as_ref().map(|_| REDACTED))
            .field("allow_plain_http", allow_plain_http)
            .finish()
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(defaults::CONNECT_TIMEOUT_SECS),
            read_timeout: Duration::from_secs(defaults::READ_TIMEOUT_SECS),
            min_speed: Some(MinSpeed {
                bytes_per_sec: defaults::MIN_SPEED_BYTES_PER_SEC,
                window: Duration::from_secs(defaults::MIN_SPEED_WINDOW_SECS),
            }),
            attempts: defaults::ATTEMPTS,
            backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(8),
            bearer_token: None,
            allow_plain_http: false,
        }
    }
}

impl HttpOptions {
    /// The wait before retry number `retry` (1-based): exponential, capped, with jitter in
    /// [50 %, 100 %] so many clients do not retry in lockstep; a server's `Retry-After`
    /// (capped too) wins when it is longer.
    pub fn backoff_for(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .backoff
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
            .min(self.max_backoff);
        let mut r = [0u8; 2];
        let jitter = match getrandom::fill(&mut r) {
            Ok(()) => 0.5 + f64::from(u16::from_le_bytes(r)) / f64::from(u16::MAX) / 2.0,
            Err(_) => 0.75,
        };
        let wait = exp.mul_f64(jitter);
        match retry_after {
            Some(ra) => wait.max(ra.min(self.max_backoff)),
            None => wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_honours_retry_after() {
        let o = HttpOptions {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..HttpOptions::default()
        };
        for retry in 1..=3u32 {
            let w = o.backoff_for(retry, None);
            let full = Duration::from_millis(100 * (1 << (retry - 1)));
            assert!(w >= full / 2 && w <= full, "retry {retry}: {w:?}");
        }
        assert!(o.backoff_for(30, None) <= Duration::from_secs(1));
        assert_eq!(
            o.backoff_for(1, Some(Duration::from_secs(60))),
            Duration::from_secs(1),
            "Retry-After is capped"
        );
    }
}
