//! The README and every guide under `docs/`, compiled as doctests (`cargo test --doc -p
//! gpubuf`): a Rust snippet that drifts from the API fails the build. Snippets for a GPU
//! backend compile with its feature and return early where the backend cannot run.

#[doc = include_str!("../../../README.md")]
pub struct Readme;
#[doc = include_str!("../../../docs/architecture.md")]
pub struct Architecture;
#[doc = include_str!("../../../docs/backends.md")]
pub struct Backends;
#[doc = include_str!("../../../docs/benchmarks.md")]
pub struct Benchmarks;
#[doc = include_str!("../../../docs/buffer.md")]
pub struct BufferGuide;
#[doc = include_str!("../../../docs/bufferizer.md")]
pub struct BufferizerGuide;
#[doc = include_str!("../../../docs/halo.md")]
pub struct HaloGuide;
// docs/interop.md is not compiled yet: its snippets are fragments over names defined in
// the text around them (`cl`, `nd`, `SOURCE`); it joins this list once they are programs.
#[doc = include_str!("../../../docs/mirror.md")]
pub struct MirrorGuide;
#[doc = include_str!("../../../docs/mpi.md")]
pub struct MpiGuide;
#[doc = include_str!("../../../docs/pool.md")]
pub struct PoolGuide;
#[doc = include_str!("../../../docs/reliability.md")]
pub struct Reliability;
