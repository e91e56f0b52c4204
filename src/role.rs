//! The names of the four trust roles (root, builder, reviewer, publisher): how files and
//! messages spell them. Imports nothing of the crate, so the error type can name a role.

use std::fmt;

/// Names a role, for lookups and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleName {
    /// See [`Roles::root`](crate::metadata::Roles::root).
    Root,
    /// See [`Roles::builder`](crate::metadata::Roles::builder).
    Builder,
    /// See [`Roles::reviewer`](crate::metadata::Roles::reviewer).
    Reviewer,
    /// See [`Roles::publisher`](crate::metadata::Roles::publisher).
    Publisher,
}

impl RoleName {
    /// All roles, in a fixed order.
    pub const ALL: [RoleName; 4] = [
        RoleName::Root,
        RoleName::Builder,
        RoleName::Reviewer,
        RoleName::Publisher,
    ];
    /// The role's name as written in files and messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            RoleName::Root => "root",
            RoleName::Builder => "builder",
            RoleName::Reviewer => "reviewer",
            RoleName::Publisher => "publisher",
        }
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RoleName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RoleName::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!("unknown role {s:?}: expected root, builder, reviewer or publisher")
            })
    }
}
