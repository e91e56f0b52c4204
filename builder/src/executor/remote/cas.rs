//! The server's content-addressable storage as the remote executor uses it: what it lacks
//! is uploaded (`FindMissingBlobs`, then `BatchUpdateBlobs` in batches under the server's
//! size limit, `ByteStream.Write` in chunks for a larger blob), and outputs come back
//! (`BatchReadBlobs`, or `ByteStream.Read`). Blobs once found or uploaded are remembered for
//! the life of the process, so the toolkit is asked about and sent once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::bytestream as bs;
use re::content_addressable_storage_client::ContentAddressableStorageClient;
use tonic::transport::Channel;

use super::tree::{Blob, Source};

/// A batch stays under this many bytes (BuildGrid caps a request at about 4 MiB).
pub const BATCH_BYTES: i64 = 3 << 20;
/// A ByteStream chunk.
const CHUNK: usize = 1 << 20;

/// The CAS of one server instance.
#[derive(Debug)]
pub struct Cas {
    channel: Channel,
    instance: String,
    /// Blobs the server is known to hold.
    present: Mutex<HashSet<Blob>>,
    /// One upload at a time: two actions starting together send the toolkit once, not
    /// twice.
    uploading: tokio::sync::Mutex<()>,
}

/// A gRPC failure, as an I/O error naming what was asked.
pub fn grpc(what: &str, status: tonic::Status) -> std::io::Error {
    std::io::Error::other(format!(
        "{what}: {} ({:?})",
        status.message(),
        status.code()
    ))
}

impl Cas {
    /// The CAS of `instance` on `channel`.
    pub fn new(channel: Channel, instance: String) -> Cas {
        Cas {
            channel,
            instance,
            present: Mutex::new(HashSet::new()),
            uploading: tokio::sync::Mutex::new(()),
        }
    }

    fn client(&self) -> ContentAddressableStorageClient<Channel> {
        ContentAddressableStorageClient::new(self.channel.clone())
            .max_decoding_message_size(64 << 20)
    }

    fn resource(&self, tail: &str) -> String {
        match self.instance.as_str() {
            "" => tail.to_string(),
            i => format!("{i}/{tail}"),
        }
    }

    /// Uploads what the server lacks of `blobs`; returns how many bytes went up.
    pub async fn upload(&self, blobs: &BTreeMap<Blob, Source>) -> std::io::Result<u64> {
        let unknown = || -> Vec<&Blob> {
            let present = self.present.lock().expect("present");
            blobs.keys().filter(|b| !present.contains(*b)).collect()
        };
        if unknown().is_empty() {
            return Ok(0);
        }
        let _one = self.uploading.lock().await;
        // What the upload this one waited for sent is known now.
        let unknown = unknown();
        if unknown.is_empty() {
            return Ok(0);
        }
        let mut missing = Vec::new();
        for chunk in unknown.chunks(10_000) {
            let reply = self
                .client()
                .find_missing_blobs(re::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: chunk.iter().map(|b| b.proto()).collect(),
                    ..Default::default()
                })
                .await
                .map_err(|s| grpc("FindMissingBlobs", s))?
                .into_inner();
            missing.extend(reply.missing_blob_digests.iter().map(Blob::from_proto));
        }
        let mut sent = 0u64;
        let mut batch: Vec<re::batch_update_blobs_request::Request> = Vec::new();
        let mut batch_bytes = 0i64;
        for blob in &missing {
            let bytes = read(&blobs[blob])?;
            sent += bytes.len() as u64;
            if blob.size > BATCH_BYTES {
                self.write(blob, &bytes).await?;
                continue;
            }
            if batch_bytes + blob.size > BATCH_BYTES {
                self.send(std::mem::take(&mut batch)).await?;
                batch_bytes = 0;
            }
            batch_bytes += blob.size;
            batch.push(re::batch_update_blobs_request::Request {
                digest: Some(blob.proto()),
                data: bytes,
                ..Default::default()
            });
        }
        self.send(batch).await?;
        self.present
            .lock()
            .expect("present")
            .extend(blobs.keys().cloned());
        Ok(sent)
    }

    async fn send(
        &self,
        requests: Vec<re::batch_update_blobs_request::Request>,
    ) -> std::io::Result<()> {
        if requests.is_empty() {
            return Ok(());
        }
        let reply = self
            .client()
            .batch_update_blobs(re::BatchUpdateBlobsRequest {
                instance_name: self.instance.clone(),
                requests,
                ..Default::default()
            })
            .await
            .map_err(|s| grpc("BatchUpdateBlobs", s))?
            .into_inner();
        for r in reply.responses {
            if let Some(s) = r.status.filter(|s| s.code != 0) {
                return Err(std::io::Error::other(format!(
                    "BatchUpdateBlobs refused {}: {}",
                    r.digest.map(|d| d.hash).unwrap_or_default(),
                    s.message
                )));
            }
        }
        Ok(())
    }

    /// `ByteStream.Write` of one large blob, in chunks.
    async fn write(&self, blob: &Blob, bytes: &[u8]) -> std::io::Result<()> {
        let mut uuid = [0u8; 16];
        getrandom::fill(&mut uuid).map_err(|e| std::io::Error::other(e.to_string()))?;
        let name = self.resource(&format!(
            "uploads/{}/blobs/{}/{}",
            hex::encode(uuid),
            blob.hash,
            blob.size
        ));
        let mut requests = Vec::new();
        let mut offset = 0usize;
        loop {
            let end = (offset + CHUNK).min(bytes.len());
            requests.push(bs::WriteRequest {
                resource_name: if offset == 0 {
                    name.clone()
                } else {
                    String::new()
                },
                write_offset: offset as i64,
                finish_write: end == bytes.len(),
                data: bytes[offset..end].to_vec(),
            });
            offset = end;
            if offset == bytes.len() {
                break;
            }
        }
        let reply = bs::byte_stream_client::ByteStreamClient::new(self.channel.clone())
            .write(futures_util::stream::iter(requests))
            .await
            .map_err(|s| grpc("ByteStream.Write", s))?
            .into_inner();
        if reply.committed_size != blob.size {
            return Err(std::io::Error::other(format!(
                "ByteStream.Write of {}: the server committed {} of {} bytes",
                blob.hash, reply.committed_size, blob.size
            )));
        }
        Ok(())
    }

    /// The bytes of `blob`, checked against its digest.
    pub async fn read(&self, blob: &Blob) -> std::io::Result<Vec<u8>> {
        let bytes = if blob.size > BATCH_BYTES {
            let mut stream = bs::byte_stream_client::ByteStreamClient::new(self.channel.clone())
                .read(bs::ReadRequest {
                    resource_name: self.resource(&format!("blobs/{}/{}", blob.hash, blob.size)),
                    read_offset: 0,
                    read_limit: 0,
                })
                .await
                .map_err(|s| grpc("ByteStream.Read", s))?
                .into_inner();
            let mut out = Vec::with_capacity(blob.size as usize);
            while let Some(chunk) = stream
                .message()
                .await
                .map_err(|s| grpc("ByteStream.Read", s))?
            {
                out.extend_from_slice(&chunk.data);
            }
            out
        } else {
            let reply = self
                .client()
                .batch_read_blobs(re::BatchReadBlobsRequest {
                    instance_name: self.instance.clone(),
                    digests: vec![blob.proto()],
                    ..Default::default()
                })
                .await
                .map_err(|s| grpc("BatchReadBlobs", s))?
                .into_inner();
            let r = reply.responses.into_iter().next().ok_or_else(|| {
                std::io::Error::other(format!("BatchReadBlobs returned nothing for {}", blob.hash))
            })?;
            if let Some(s) = r.status.filter(|s| s.code != 0) {
                return Err(std::io::Error::other(format!(
                    "BatchReadBlobs {}: {}",
                    blob.hash, s.message
                )));
            }
            r.data
        };
        // The server's word is not taken: the bytes must be what was asked for.
        if Blob::of(&bytes) != *blob {
            return Err(std::io::Error::other(format!(
                "the server's CAS returned other bytes for {} ({} bytes)",
                blob.hash, blob.size
            )));
        }
        Ok(bytes)
    }
}

fn read(source: &Source) -> std::io::Result<Vec<u8>> {
    match source {
        Source::File(p) => std::fs::read(p),
        Source::Bytes(b) => Ok(b.as_ref().clone()),
    }
}
