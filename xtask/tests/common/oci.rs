//! Reading an OCI registry the way a third party does, with nothing but the distribution
//! spec over plain HTTP: a release's referrers through the referrers API or its tag schema
//! (issue 46).

/// `GET url` with `accept`: status and body.
pub fn get(url: &str, accept: &str) -> (u16, Vec<u8>) {
    let (status, _, body) = super::server::http_get(url, accept);
    (status, body)
}

/// Lower-case hex sha256.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// What the tag schema leads to from a release tag.
pub struct Attested {
    /// The release manifest's digest (`sha256:…`).
    pub subject: String,
    /// The referrers tag's image index.
    pub index: serde_json::Value,
    /// The first referrer's manifest.
    pub referrer: serde_json::Value,
    /// Its layer's title (a layout path) and bytes.
    pub title: String,
    pub bytes: Vec<u8>,
}

/// Follows the referrers tag schema from `base` (`http://HOST/v2/REPO`) and `tag` to the
/// first referrer's layer; asserts the registry has no referrers API.
pub fn through_tag_schema(base: &str, tag: &str) -> Attested {
    let subject = subject(base, tag);
    let (status, _) = get(&format!("{base}/referrers/{subject}"), INDEX);
    assert_eq!(status, 404, "docker-registry 2.8.2 has no referrers API");
    let (status, index) = get(
        &format!("{base}/manifests/{}", subject.replace(':', "-")),
        INDEX,
    );
    assert_eq!(status, 200, "no referrers tag");
    first(base, subject, &index)
}

/// Follows the referrers API from `base` and `tag` to the first referrer's layer; asserts
/// the registry keeps no referrers tag.
pub fn through_api(base: &str, tag: &str) -> Attested {
    let subject = subject(base, tag);
    let (status, index) = get(&format!("{base}/referrers/{subject}"), INDEX);
    assert_eq!(status, 200, "no referrers API");
    let (status, _) = get(
        &format!("{base}/manifests/{}", subject.replace(':', "-")),
        INDEX,
    );
    assert_eq!(status, 404, "a referrers tag on a registry with the API");
    first(base, subject, &index)
}

/// The digest (`sha256:…`) of the manifest `tag` names.
fn subject(base: &str, tag: &str) -> String {
    let (status, release) = get(&format!("{base}/manifests/{tag}"), MANIFEST);
    assert_eq!(status, 200);
    format!("sha256:{}", sha256(&release))
}

/// The first referrer an image index lists, with its layer.
fn first(base: &str, subject: String, index: &[u8]) -> Attested {
    let index: serde_json::Value = serde_json::from_slice(index).unwrap();
    let digest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, referrer) = get(&format!("{base}/manifests/{digest}"), MANIFEST);
    let referrer: serde_json::Value = serde_json::from_slice(&referrer).unwrap();
    assert_eq!(
        referrer["subject"]["digest"],
        subject.as_str(),
        "{referrer}"
    );
    let layer = &referrer["layers"][0];
    let (_, bytes) = get(
        &format!("{base}/blobs/{}", layer["digest"].as_str().unwrap()),
        "*/*",
    );
    let title = layer["annotations"]["org.opencontainers.image.title"]
        .as_str()
        .unwrap()
        .to_string();
    Attested {
        subject,
        index,
        referrer,
        title,
        bytes,
    }
}

/// `PUT url` with `body` as `content_type`; the registry must answer 201 Created.
pub fn put(url: &str, content_type: &str, body: Vec<u8>) {
    let r = reqwest::blocking::Client::new()
        .put(url)
        .header("Content-Type", content_type)
        .body(body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{url}: {:?}", r.text());
}
