//! The README and every guide under `docs/`, compiled as doctests (`cargo test --doc -p
//! gpubuf --features opencl,cuda`): a Rust snippet that drifts from the API fails the build.
//! Snippets for a GPU backend compile with its feature and return early where the backend
//! cannot run; the interop guide, which uses both GPU backends, needs both features.

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
#[doc = include_str!("../../../docs/device.md")]
pub struct DeviceGuide;
#[doc = include_str!("../../../docs/halo.md")]
pub struct HaloGuide;
#[doc = include_str!("../../../docs/interop.md")]
#[cfg(all(feature = "opencl", feature = "cuda"))]
pub struct InteropGuide;
#[doc = include_str!("../../../docs/mirror.md")]
pub struct MirrorGuide;
#[doc = include_str!("../../../docs/mpi.md")]
pub struct MpiGuide;
#[doc = include_str!("../../../docs/pool.md")]
pub struct PoolGuide;
#[doc = include_str!("../../../docs/reliability.md")]
pub struct Reliability;
