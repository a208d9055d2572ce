//! After the lock: everything here starts from a written `kart.lock` and the blobs it
//! names, and carries them toward the GPUs that will load them. Nothing here compiles a
//! config anew except `verify --rebuild`, which rebuilds to compare against the lock.
//! The folder is named for that shared direction, from the lock out to the machines
//! (`deploy`, not `fleet`: `verify`, `gc` and `ls` serve one machine's store too).
//! - [`maintain`]: `kart verify` and `kart gc`, the store checked and pruned against
//!   the lock;
//! - [`listing`]: `kart ls`, the lock's records as rows;
//! - [`attest`]: `kart.attest`, which blobs were loaded (and the smoke kernel
//!   launched) on which GPU and driver;
//! - [`tune`]: offline tuning into `kart.tune` (`best()` is the runtime crate's);
//! - [`coverage`]: what each GPU of a fleet loads, whether it is tuned and attested
//!   there;
//! - [`bundle`]: one file of just that, for the runtime crate to load;
//! - [`problems`]: the problems a workload runs, from a problems file or a trace.

pub mod attest;
pub mod bundle;
pub mod coverage;
pub mod listing;
pub mod maintain;
pub mod problems;
pub mod tune;
