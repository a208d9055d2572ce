//! What kart's tests, benchmarks and reliability campaigns share and the product does
//! not: a real HTTP cache server on loopback ([`nginx`]).
#![deny(missing_docs)]

pub mod nginx;
