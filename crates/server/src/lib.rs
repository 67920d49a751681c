//! Peregrine server crate: see docs/architecture.md. Empty until its issue lands.
