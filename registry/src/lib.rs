//! cuda-aot-registry: registry storage and transport.
