//! Bounded, strict JSON parsing: size checked first, duplicated keys refused, then typed parsing.

use serde::de::{DeserializeOwned, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use crate::error::{Error, Result};

/// Parses `bytes` as `T` after checking the size limit and refusing duplicated object keys.
///
/// Types parsed here use `#[serde(deny_unknown_fields)]`, so unknown fields are refused too.
pub fn parse<T: DeserializeOwned>(bytes: &[u8], limit: u64, what: &str) -> Result<T> {
    let len = bytes.len() as u64;
    if len > limit {
        return Err(Error::TooLarge {
            what: what.into(),
            limit,
            actual: len,
        });
    }
    check_no_duplicate_keys(bytes, what)?;
    serde_json::from_slice(bytes).map_err(|e| Error::Json {
        what: what.into(),
        // Field names and values in the message come from the file.
        message: crate::error::escape_untrusted(&e.to_string()),
    })
}

/// Serialises `value` as indented JSON with a trailing newline (the on-disk form).
pub fn to_vec<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).expect("cuda-aot types always serialise");
    out.push(b'\n');
    out
}

/// Serialises `value` compactly: the canonical form that identity digests are taken over.
pub fn to_canonical<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("cuda-aot types always serialise")
}

fn check_no_duplicate_keys(bytes: &[u8], what: &str) -> Result<()> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match de.deserialize_any(DupCheck(&found)) {
        Ok(()) => Ok(()),
        // The repeated key travels as data beside serde's error, never inside its text.
        Err(_) if found.borrow().is_some() => Err(Error::DuplicateKey {
            what: what.into(),
            key: found.take().unwrap_or_default(),
        }),
        Err(e) => Err(Error::Json {
            what: what.into(),
            message: crate::error::escape_untrusted(&e.to_string()),
        }),
    }
}

/// Walks any JSON value and fails on the first object with a repeated key, which it
/// records in the cell.
#[derive(Clone, Copy)]
struct DupCheck<'a>(&'a RefCell<Option<String>>);

impl<'de> serde::de::DeserializeSeed<'de> for DupCheck<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupCheck<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                *self.0.borrow_mut() = Some(key);
                return Err(A::Error::custom("duplicated key"));
            }
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct T {
        #[allow(dead_code)]
        a: u32,
        #[allow(dead_code)]
        m: std::collections::BTreeMap<String, u32>,
    }

    #[test]
    fn duplicated_key_in_a_nested_map_is_refused() {
        let err = parse::<T>(br#"{"a":1,"m":{"x":1,"x":2}}"#, 1000, "t").unwrap_err();
        assert!(
            matches!(err, Error::DuplicateKey { ref key, .. } if key == "x"),
            "{err}"
        );
    }

    #[test]
    fn duplicated_top_level_key_is_refused() {
        let err = parse::<T>(br#"{"a":1,"a":1,"m":{}}"#, 1000, "t").unwrap_err();
        assert!(
            matches!(err, Error::DuplicateKey { ref key, .. } if key == "a"),
            "{err}"
        );
    }

    #[test]
    fn unknown_field_is_refused() {
        let err = parse::<T>(br#"{"a":1,"m":{},"b":2}"#, 1000, "t").unwrap_err();
        assert!(
            matches!(err, Error::Json { ref message, .. } if message.contains("unknown field")),
            "{err}"
        );
    }

    #[test]
    fn size_is_checked_before_parsing() {
        let err = parse::<T>(b"{ not even json", 4, "t").unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    limit: 4,
                    actual: 15,
                    ..
                }
            ),
            "{err}"
        );
    }
}
