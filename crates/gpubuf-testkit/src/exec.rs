//! Running a [`crate::strategies::PlanCase`] on a backend and reading the bytes back.

use crate::strategies::PlanCase;
use gpubuf::{Kernels, MemRef, Result};

/// Uploads `bytes` into a new allocation.
///
/// # Errors
/// Allocation and transfer errors.
pub fn upload<B: Kernels>(b: &B, bytes: &[u8]) -> Result<B::Memory> {
    let m = b.allocate(bytes.len())?;
    b.write(b.default_stream(), &m, 0, bytes)?;
    Ok(m)
}

/// Reads a whole allocation back.
///
/// # Errors
/// Transfer errors.
pub fn download<B: Kernels>(b: &B, m: &B::Memory) -> Result<Vec<u8>> {
    use gpubuf::DeviceMemory;
    let mut out = vec![0u8; m.len()];
    b.read(b.default_stream(), m, 0, &mut out)?;
    Ok(out)
}

/// Gathers the case's sources into a buffer that starts as `initial`; returns its bytes.
///
/// # Errors
/// Whatever the backend returns.
pub fn gather<B: Kernels>(b: &B, case: &PlanCase, initial: &[u8]) -> Result<Vec<u8>> {
    let mems: Vec<B::Memory> = case.sources.iter().map(|s| upload(b, s)).collect::<Result<_>>()?;
    let refs: Vec<MemRef<'_, B::Memory>> = mems.iter().map(MemRef::whole).collect();
    let buf = upload(b, initial)?;
    let plan = b.prepare(&case.plan, case.dtype)?;
    b.gather(b.default_stream(), &plan, &refs, MemRef::whole(&buf))?;
    download(b, &buf)
}

/// Scatters `buffer` into targets that start as `targets`; returns their bytes.
///
/// # Errors
/// Whatever the backend returns.
pub fn scatter<B: Kernels>(
    b: &B,
    case: &PlanCase,
    buffer: &[u8],
    targets: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>> {
    let mems: Vec<B::Memory> = targets.iter().map(|s| upload(b, s)).collect::<Result<_>>()?;
    let refs: Vec<MemRef<'_, B::Memory>> = mems.iter().map(MemRef::whole).collect();
    let buf = upload(b, buffer)?;
    let plan = b.prepare(&case.plan, case.dtype)?;
    b.scatter(b.default_stream(), &plan, MemRef::whole(&buf), &refs)?;
    mems.iter().map(|m| download(b, m)).collect()
}
