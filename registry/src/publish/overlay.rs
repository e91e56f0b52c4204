//! A registry source with files laid over another: what readers will see once a commit
//! lands, verified before it does (a publish under delegations, a publishing server).

use std::collections::BTreeMap;

use cuda_aot::source::RegistrySource;

/// A registry source that sees `files` on top of `dir`.
pub(crate) struct Overlay<'a, S: ?Sized + RegistrySource> {
    /// The store's files.
    pub(crate) dir: &'a S,
    /// The files laid over them, by layout path.
    pub(crate) files: BTreeMap<String, &'a [u8]>,
}

impl<S: ?Sized + RegistrySource> RegistrySource for Overlay<'_, S> {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        match self.files.get(path) {
            Some(b) => {
                let n = b
                    .len()
                    .min(usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX));
                Ok(Some(b[..n].to_vec()))
            }
            None => self.dir.read_at_most(path, max),
        }
    }
    fn describe(&self) -> String {
        self.dir.describe()
    }
}
