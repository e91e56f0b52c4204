//! The compiled files of device-linked modules in a shared build cache: each relocatable
//! cubin (or LTO IR) under its unit id (`v1/units/<id hex>/object`), with a builder's
//! signature over exactly those bytes for exactly that id (`unit.json`, a [`CacheUnit`]),
//! and the file's dependency records signed like a job's. A machine whose module changed
//! in one file takes the others' units from the cache and compiles only that file.

use anyhow::Result;
use cuda_aot::Digest;
use cuda_aot::metadata::CacheUnit;

use super::{ENTRY_LIMIT, Remote};
use crate::build::Plan;
use crate::build::cache::Cache;
use crate::build::spec::Job;

fn unit_dir(id: &Digest) -> String {
    format!("v1/units/{}", id.hex())
}

impl Remote {
    /// The object of unit `id`, if the shared cache has one a builder key of the root
    /// signed for exactly that id and those bytes, and it is a whole ELF file (or a fatbin
    /// of LTO IR); a unit that fails is refused (listed with the refusals) and `None`.
    pub fn fetch_unit(&self, id: &Digest) -> Option<Vec<u8>> {
        if self.down().is_some() {
            return None;
        }
        let dir = unit_dir(id);
        let envelope = self.read(&format!("{dir}/unit.json"), ENTRY_LIMIT)?;
        match self.check_unit(id, &envelope) {
            Ok(object) => Some(object),
            Err(reason) => {
                self.refuse(format!("unit {}", id.short()), reason);
                None
            }
        }
    }

    fn check_unit(&self, id: &Digest, envelope: &[u8]) -> std::result::Result<Vec<u8>, String> {
        let signed: CacheUnit = self
            .root
            .open::<CacheUnit>(envelope, ENTRY_LIMIT, "cache unit")
            .map_err(|e| format!("signature: {e}"))?
            .doc;
        if signed.id != *id {
            return Err(format!(
                "signed for unit {}, not {} (replayed under another unit)",
                signed.id.short(),
                id.short()
            ));
        }
        let limit = crate::limits::limits().blob;
        if signed.size > limit {
            return Err(format!(
                "a signed object of {} bytes, past the {limit}-byte limit",
                signed.size
            ));
        }
        let object = self
            .read(&format!("{}/object", unit_dir(id)), signed.size)
            .ok_or("the signed object is missing or larger than signed")?;
        if object.len() as u64 != signed.size || Digest::of(&object) != signed.object {
            return Err(format!(
                "the object is not the signed one (blake3 {} of {} bytes, signed {} of {})",
                Digest::of(&object).short(),
                object.len(),
                signed.object.short(),
                signed.size
            ));
        }
        if !cuda_aot::elf::is_fatbin(&object) {
            cuda_aot::elf::check_structure(&object).map_err(|e| format!("object: {e}"))?;
        }
        Ok(object)
    }

    /// Adds the compiled files of `job`, a device-linked job this build finished (read-write):
    /// each file's newest local unit with its signature, unless the shared cache has it
    /// already, and the file's dependency records. Returns how many objects it uploaded.
    pub fn add_units(&self, local: &Cache, plan: &Plan, job: &Job) -> Result<usize> {
        let signer = self.signer()?;
        let mut uploaded = 0;
        for file in &plan.spec.modules[job.module].sources {
            let key = plan.unit_key(job, file);
            let Some(id) = local.records(&key).first().map(|r| r.identity) else {
                continue;
            };
            let Some(unit) = local.unit(&id) else {
                continue;
            };
            let dir = unit_dir(&id);
            let have = self
                .read(&format!("{dir}/unit.json"), ENTRY_LIMIT)
                .is_some_and(|e| self.check_unit(&id, &e).is_ok());
            if !have {
                // The object first, the signature last.
                self.put(&format!("{dir}/object"), &unit.object)?;
                let env =
                    cuda_aot::metadata::sign_doc(&CacheUnit::over(id, &unit.object), &[signer]);
                self.put(&format!("{dir}/unit.json"), &env.to_bytes())?;
                uploaded += 1;
            }
            self.put_records(local, &key, signer)?;
        }
        Ok(uploaded)
    }
}
