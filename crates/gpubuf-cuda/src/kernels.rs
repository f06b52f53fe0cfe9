//! Copy plans on CUDA: `kernels/shared/plan_blocks.h` compiled ahead of time ([`crate::aot`]) and
//! loaded once per context, plan tables uploaded once per plan, one launch per plan (up to
//! [`MAX_SOURCES`] sources; a plan with more is split by source).
//!
//! The kernel runs the plan in blocks (gpubuf-core's `encode_blocks`): one CUDA block of
//! 256 threads per block of 4096 buffer elements or 64 x 64 tile of a transposed segment,
//! the same algorithm as the OpenCL backend's block kernel on GPUs (which moves blocks of
//! 1024, 32 x 32 tiles: an 8-byte 64 x 64 tile needs more local memory than some OpenCL
//! devices have).

use crate::backend::CudaBackend;
use crate::error::{driver, maybe_oom, unavailable};
use crate::memory::{CudaMemory, CudaStream};
use crate::order::Ready;
use cudarc::driver::result;
use cudarc::driver::sys::{CUfunction, CUmodule};
use gpubuf_core::encode::{encode_blocks, BlockShape};
use gpubuf_core::{
    check_plan_args, check_scatter_args, Allocator, BackendKind, CopyPlan, DType, Error, Kernels, MemRef,
    PreparedPlan, Result,
};
use parking_lot::Mutex;
use std::ffi::{c_void, CString};
use std::sync::Arc;

/// The kernel source: `kernels/cuda/prelude.cuh`, then the shared `kernels/shared/segment.h`
/// and `kernels/shared/plan_blocks.h` (the OpenCL backend's block kernel, the same text).
pub const PLAN_SOURCE: &str = crate::aot::PLAN.text;

/// Sources one launch can take (the size of the `SrcTable` kernel parameter).
pub const MAX_SOURCES: usize = 256;

/// Threads per block of the plan kernels (`THREADS` and the launch bounds in plan_blocks.h).
const BLOCK: u32 = 256;

/// Buffer elements per block (`ELEMS` in kernels/cuda/prelude.cuh): sixteen independent moves per thread,
/// tiles of 64 x 64. Measured on an H200 (`gpubuf bench copy`, docs/benchmarks.md): blocks
/// of 1024 spend a third of the time of a contiguous gather finding their segment and
/// first element (0.67 of a device copy), blocks of 4096 amortise that (0.95); 512
/// threads a block of 4096 gave 0.85.
const BLOCK_ELEMS: usize = 4096;

/// Compiles the plan kernels to PTX with NVRTC. Needs libnvrtc only, no GPU, so CI runs it
/// to catch a broken `.cu` file.
///
/// # Errors
/// [`Error::BackendUnavailable`] without NVRTC; [`Error::Build`] with NVRTC's log.
pub fn compile_ptx() -> Result<String> {
    crate::device::nvrtc_available()?;
    let _span = tracing::debug_span!("cuda.nvrtc").entered();
    match cudarc::nvrtc::compile_ptx(PLAN_SOURCE) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(e) => Err(Error::Build { backend: BackendKind::Cuda, log: format!("{e:?}") }),
    }
}

#[derive(Default)]
pub(crate) struct ModuleCache {
    module: Mutex<Option<Arc<PlanModule>>>,
}

pub(crate) struct PlanModule {
    raw: CUmodule,
    gather: [CUfunction; 4],
    scatter: [CUfunction; 4],
    ctx: Arc<cudarc::driver::CudaContext>,
}

// SAFETY: module and function handles are plain driver handles, valid in any thread with
// the context bound, and never mutated after loading.
unsafe impl Send for PlanModule {}
// SAFETY: as above.
unsafe impl Sync for PlanModule {}

impl Drop for PlanModule {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: loaded once by `module::load_data`, unloaded once.
        let _ = unsafe { result::module::unload(self.raw) };
    }
}

impl CudaBackend {
    fn module(&self) -> Result<Arc<PlanModule>> {
        let mut m = self.inner.modules.module.lock();
        if let Some(m) = m.as_ref() {
            return Ok(m.clone());
        }
        self.bind()?;
        let (major, minor) =
            self.inner.ctx.compute_capability().map_err(|e| driver(e, "compute capability"))?;
        let cc =
            |v: i32| u32::try_from(v).map_err(|_| unavailable(format!("compute capability {major}.{minor}")));
        let (raw, _) = crate::aot::load(crate::aot::PLAN, cc(major)?, cc(minor)?)?;
        let get = |name: String| -> Result<CUfunction> {
            let c = CString::new(name.clone()).map_err(|_| Error::invalid("kernel name"))?;
            // SAFETY: `raw` is the module just loaded.
            unsafe { result::module::get_function(raw, c) }
                .map_err(|e| driver(e, &format!("cuModuleGetFunction({name})")))
        };
        let mut gather = [std::ptr::null_mut(); 4];
        let mut scatter = [std::ptr::null_mut(); 4];
        for (i, w) in [1, 2, 4, 8].iter().enumerate() {
            gather[i] = get(format!("gather_{w}"))?;
            scatter[i] = get(format!("scatter_{w}"))?;
        }
        let module = Arc::new(PlanModule { raw, gather, scatter, ctx: self.inner.ctx.clone() });
        *m = Some(module.clone());
        Ok(module)
    }
}

/// A plan prepared for one CUDA device.
pub struct CudaPlan {
    plan: CopyPlan,
    dtype: DType,
    /// The element type the kernels run with (`gpubuf_core::lane_plan`).
    exec: DType,
    module: Option<Arc<PlanModule>>,
    parts: Vec<Part>,
}

struct Part {
    sources: Vec<usize>,
    segs: CudaMemory,
    /// Prefix sums of the segments' block counts.
    groups: CudaMemory,
    nseg: i32,
    /// CUDA blocks of one launch (at least 1).
    blocks: u32,
}

impl std::fmt::Debug for CudaPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPlan").field("dtype", &self.dtype).field("launches", &self.parts.len()).finish()
    }
}

impl PreparedPlan for CudaPlan {
    fn plan(&self) -> &CopyPlan {
        &self.plan
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

/// A plan table in device memory: allocated and filled on the default stream, with its
/// `Ready` event recorded after the copy, so a launch on any stream (a non-blocking one
/// adopted from cudarc too) waits for the table, and nothing else waits for it.
fn upload_words(b: &CudaBackend, words: &[i64]) -> Result<CudaMemory> {
    let mut mem = b.allocate(std::mem::size_of_val(words))?;
    if !words.is_empty() {
        b.bind()?;
        let home = gpubuf_core::Backend::default_stream(b);
        // SAFETY: `mem` holds exactly the words' bytes, allocated on `home` (the copy is
        // queued after the allocation); from pageable memory the driver stages the bytes
        // before returning, so `words` may be dropped at once.
        unsafe { result::memcpy_htod_async(mem.ptr, words, home.raw) }
            .map_err(|e| driver(e, "cuMemcpyHtoDAsync"))?;
        let after = Ready::record(&mem.ctx, home.id, home.raw).map_err(|e| driver(e, "cuEventRecord"))?;
        mem.ready = Some(after);
    }
    Ok(mem)
}

impl Kernels for CudaBackend {
    type Plan = CudaPlan;

    fn prepare(&self, plan: &CopyPlan, dtype: DType) -> Result<CudaPlan> {
        let mut parts = Vec::new();
        // A complex element runs as a word or as its float lanes (`lane_plan`).
        let (lanes, exec) = gpubuf_core::lane_plan(plan, dtype)?;
        for (sources, sub) in lanes.split_by_source(MAX_SOURCES)? {
            let enc = encode_blocks(&sub, BlockShape::new(BLOCK_ELEMS));
            if enc.blocks() == 0 {
                continue;
            }
            // A grid's x dimension takes up to 2^31 - 1 blocks.
            let blocks = u32::try_from(enc.blocks())
                .ok()
                .filter(|&b| b <= i32::MAX as u32)
                .ok_or_else(|| Error::plan(format!("{} blocks exceed one launch", enc.blocks())))?;
            parts.push(Part {
                sources,
                segs: upload_words(self, &enc.segments)?,
                groups: upload_words(self, &enc.groups)?,
                nseg: i32::try_from(enc.nseg()).map_err(|_| Error::plan("more than 2^31 segments"))?,
                blocks,
            });
        }
        let module = if parts.is_empty() { None } else { Some(self.module()?) };
        Ok(CudaPlan { plan: plan.clone(), dtype, exec, module, parts })
    }

    fn gather(
        &self,
        stream: &CudaStream,
        plan: &CudaPlan,
        sources: &[MemRef<'_, CudaMemory>],
        dst: MemRef<'_, CudaMemory>,
    ) -> Result<()> {
        check_plan_args(&plan.plan, plan.dtype, sources, dst)?;
        let _span = tracing::trace_span!("cuda.gather", elements = plan.plan.total()).entered();
        self.launch(stream, plan, sources, dst, true)
    }

    fn scatter(
        &self,
        stream: &CudaStream,
        plan: &CudaPlan,
        src: MemRef<'_, CudaMemory>,
        targets: &[MemRef<'_, CudaMemory>],
    ) -> Result<()> {
        check_scatter_args(&plan.plan, plan.dtype, targets, src)?;
        let _span = tracing::trace_span!("cuda.scatter", elements = plan.plan.total()).entered();
        self.launch(stream, plan, targets, src, false)
    }
}

impl CudaBackend {
    fn launch(
        &self,
        stream: &CudaStream,
        plan: &CudaPlan,
        arrays: &[MemRef<'_, CudaMemory>],
        buffer: MemRef<'_, CudaMemory>,
        gather: bool,
    ) -> Result<()> {
        let Some(module) = plan.module.as_ref() else { return Ok(()) };
        self.bind()?;
        // Every allocation the launch touches belongs to this context, and the launch
        // stream waits for any of them allocated stream-ordered on another stream.
        for a in arrays {
            self.use_on(stream, a.memory)?;
        }
        self.use_on(stream, buffer.memory)?;
        for part in &plan.parts {
            self.use_on(stream, &part.segs)?;
            self.use_on(stream, &part.groups)?;
        }
        // The tables are over the elements the kernels move (`prepare`).
        let lane = plan.exec;
        let w = lane.size().trailing_zeros() as usize;
        let f = if gather { module.gather[w] } else { module.scatter[w] };
        for part in &plan.parts {
            let mut table = [0u64; MAX_SOURCES];
            for (slot, &src) in part.sources.iter().enumerate() {
                table[slot] = device_address(arrays[src].memory.ptr, arrays[src].offset)?;
            }
            let mut segs = part.segs.ptr;
            let mut groups = part.groups.ptr;
            let mut nseg = part.nseg;
            let mut is_float = i32::from(lane.is_float());
            let mut buf = device_address(buffer.memory.ptr, buffer.offset)?;
            let mut params: [*mut c_void; 6] = [
                &mut segs as *mut _ as *mut c_void,
                &mut groups as *mut _ as *mut c_void,
                &mut nseg as *mut _ as *mut c_void,
                &mut is_float as *mut _ as *mut c_void,
                &mut buf as *mut _ as *mut c_void,
                &mut table as *mut _ as *mut c_void,
            ];
            // SAFETY: the parameters match plan_blocks.h's signature (two table pointers, int,
            // int, element pointer, SrcTable by value); every pointer is a live allocation
            // checked by `check_plan_args`; one CUDA block of BLOCK threads (the kernel's
            // launch bounds) per table block, so every block the kernel looks up exists in
            // `groups`; the driver copies the parameter values at launch.
            unsafe {
                result::launch_kernel(f, (part.blocks, 1, 1), (BLOCK, 1, 1), 0, stream.raw, &mut params)
            }
            .map_err(|e| maybe_oom(e, "cuLaunchKernel", 0))?;
        }
        Ok(())
    }
}

/// The device address `offset` bytes into the allocation at `ptr`. Ranges checked by
/// `check_plan_args` lie inside their allocation, so this never fails for them; the check
/// keeps a wrapped address from ever reaching a kernel.
fn device_address(ptr: u64, offset: usize) -> Result<u64> {
    u64::try_from(offset)
        .ok()
        .and_then(|o| ptr.checked_add(o))
        .ok_or_else(|| Error::invalid(format!("device address {ptr:#x} + {offset} overflows")))
}

#[cfg(test)]
mod tests {
    /// The host's block shape is the one the shared block kernel is built with.
    #[test]
    fn block_shape_matches_the_kernel_source() {
        let src = super::PLAN_SOURCE;
        assert!(src.contains(&format!("\n#define ELEMS {}\n", super::BLOCK_ELEMS)), "ELEMS");
        assert!(src.contains(&format!("\n#define THREADS {}\n", super::BLOCK)), "THREADS");
        assert!(src.contains(&format!("\n#define MAX_SOURCES {}\n", super::MAX_SOURCES)), "MAX_SOURCES");
    }
}
