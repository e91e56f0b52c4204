//! [`DriverFault`]: how the crate's error holds the CUDA driver layer's error without
//! naming it, so code that never calls the driver links none of that layer.

use super::ErrorKind;

/// A failure of the CUDA driver layer, as [`Error::Cuda`] and [`Error::Load`] carry it.
///
/// It holds the driver layer's own error (`cuda::CudaError`, with the `driver` feature) behind
/// a trait object, and only the driver layer makes one. So a program that verifies but never
/// calls the driver (the registry's binary, `cargo xtask verify`) links none of the driver
/// layer, even where a workspace build turns the feature on for every member
/// (`registry/tests/no_cuda.rs` checks the built binary).
///
/// [`Error::Cuda`]: super::Error::Cuda
/// [`Error::Load`]: super::Error::Load
pub struct DriverFault(pub(super) Box<dyn Fault>);

/// What [`DriverFault`] asks of the error it holds: the driver layer's error implements it.
pub(crate) trait Fault: std::error::Error + Send + Sync + 'static {
    /// What to do about it ([`Error::fix`](super::Error::fix)).
    fn fix(&self) -> String;
    /// Its kind ([`Error::kind`](super::Error::kind)).
    fn kind(&self) -> ErrorKind;
}

impl DriverFault {
    /// Holds a driver layer's error.
    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    pub(crate) fn new(fault: impl Fault) -> Self {
        DriverFault(Box::new(fault))
    }

    /// The error it holds, as a plain error (the driver layer downcasts it: `cuda()`, in
    /// `cuda/error.rs`, with the `driver` feature).
    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    pub(crate) fn fault(&self) -> &(dyn std::error::Error + 'static) {
        &*self.0
    }
}

impl std::fmt::Display for DriverFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::fmt::Debug for DriverFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::error::Error for DriverFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
