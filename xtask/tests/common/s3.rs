//! The S3-compatible server of the tests (`xtask servers s3`, moto from pinned wheels) on
//! loopback, the AWS variables a command needs to reach it, and a client for the test's
//! own reads and writes (an attacker's, where a test forges objects).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cuda_aot_registry::s3::{S3Client, S3Options};

use super::xtask;

/// The access key the tests use (the server accepts any).
const KEY_ID: &str = "cuda-aot-test";
const SECRET: &str = "cuda-aot-test-secret";

/// `xtask servers s3` with `buckets`, until SIGTERM on drop.
pub struct S3 {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl S3 {
    /// A server with `buckets`, and `extra` arguments (`--ignore-conditions`,
    /// `--fail-every N`).
    pub fn start(buckets: &[&str], extra: &[&str]) -> S3 {
        let mut cmd = xtask();
        cmd.args(["servers", "s3"]);
        for b in buckets {
            cmd.args(["--bucket", b]);
        }
        let mut child = cmd.args(extra).stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a first line").unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(v["server"], "s3", "{v}");
        let addr: SocketAddr = v["addr"].as_str().unwrap().parse().unwrap();
        std::thread::spawn(move || for _ in lines {});
        let t = Instant::now();
        while TcpStream::connect(addr).is_err() {
            assert!(t.elapsed() < Duration::from_secs(60), "s3 not listening");
            std::thread::sleep(Duration::from_millis(50));
        }
        S3 { child, addr }
    }

    /// `http://ADDR`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The AWS variables that point `cmd` at this server (any key is accepted).
    pub fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        point_at(cmd, &self.endpoint())
    }

    /// `xtask` with [`S3::env`].
    pub fn xtask(&self) -> Command {
        let mut c = xtask();
        self.env(&mut c);
        c
    }

    /// A client of `url` (`s3://BUCKET/PREFIX`) on this server, with the test key.
    pub fn client(&self, url: &str) -> S3Client {
        self.client_retrying(url, S3Options::default().retries)
    }

    /// [`S3::client`] with `retries` retries of a failed request (0: none).
    pub fn client_retrying(&self, url: &str, retries: usize) -> S3Client {
        S3Client::open(
            url,
            &S3Options {
                endpoint: Some(self.endpoint()),
                access_key: Some((KEY_ID.into(), SECRET.into())),
                retries,
                ..S3Options::default()
            },
        )
        .unwrap()
    }

    /// Whether this server answers requests with errors: a client that never retries meets
    /// one within six reads (what a storm test needs to be a storm).
    pub fn fails_requests(&self, url: &str) -> bool {
        let bare = self.client_retrying(url, 0);
        (0..6).any(|_| bare.get("v1/probe-of-the-storm", 16).is_err())
    }
}

/// The AWS variables that point `cmd` at the S3 endpoint `endpoint` (`http://ADDR`) with the
/// test key.
pub fn point_at<'a>(cmd: &'a mut Command, endpoint: &str) -> &'a mut Command {
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env_remove("AWS_SESSION_TOKEN")
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
