//! Host memory that the other processes of the node can map ([`node_buffer`]): a
//! `memfd_create` file mapped shared, adopted by the CPU backend. A halo updater made with
//! [`crate::HaloUpdater::on_node`] copies a neighbour's halo straight out of such a
//! quantity into its own (one copy in all), instead of the sender packing into a
//! shared-memory slot and the receiver unpacking from it (two copies).
//!
//! The receiving process opens the sender's file through `/proc/<pid>/fd/<fd>` (the
//! permission Open MPI's single-copy transport also needs: same user, ptrace allowed) and
//! maps it read-only. Each segment is named by its file descriptor and inode, checked when
//! it is opened, so a descriptor number that was closed and reused is never mistaken for
//! the old file.

use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{Element, Error, Kernels, Order, Result};
use gpubuf_cpu::CpuMemory;
use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Mutex;

/// A segment as a neighbour names it: descriptor, inode and length, and a serial number
/// of the owning process that no other segment of it ever had (so a cached mapping is
/// never taken for a later file, even one that got the same descriptor and inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentId {
    pub fd: u64,
    pub ino: u64,
    pub len: u64,
    pub serial: u64,
}

/// The serial number of the next segment of this process.
static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The live segments of this process, by the address of their first byte.
static SEGMENTS: Mutex<BTreeMap<usize, SegmentId>> = Mutex::new(BTreeMap::new());

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<usize, SegmentId>> {
    SEGMENTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The segment whose mapping starts at `addr`, if it is one of this process's.
pub(crate) fn lookup(addr: *const u8) -> Option<SegmentId> {
    registry().get(&(addr as usize)).copied()
}

fn os_error(what: &str) -> Error {
    Error::invalid(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// A shared mapping of a memfd file owned by this process.
struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    fd: libc::c_int,
}

// SAFETY: the mapping and the descriptor are plain resources, usable from any thread;
// the bytes are reached only through the CPU backend's memory, which orders its accesses.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`; `Segment` itself never touches the bytes.
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        registry().remove(&(self.ptr.as_ptr() as usize));
        // SAFETY: the mapping made by `Segment::new`, unmapped once, after the CPU memory
        // that adopted it dropped (this value is its owner); the descriptor, closed once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
            libc::close(self.fd);
        }
    }
}

impl Segment {
    /// A zeroed segment of `len` (> 0) bytes, its pages reserved up front (so running out
    /// of shared memory is an error here, not a bus error on first touch).
    fn new(len: usize) -> Result<Self> {
        let oom = || Error::OutOfMemory { requested: len, available: None, pool: None };
        let off = libc::off_t::try_from(len).map_err(|_| oom())?;
        // SAFETY: a NUL-terminated name; flags of memfd_create.
        let fd = unsafe { libc::memfd_create(c"gpubuf-node".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_error("memfd_create"));
        }
        let close = |e: Error| {
            // SAFETY: `fd` is the file just created, closed once, on an error path.
            unsafe { libc::close(fd) };
            e
        };
        // SAFETY: a descriptor of this process.
        if unsafe { libc::ftruncate(fd, off) } != 0 {
            return Err(close(os_error("ftruncate of node-shared memory")));
        }
        // SAFETY: as above; returns an error number instead of setting errno.
        if unsafe { libc::posix_fallocate(fd, 0, off) } != 0 {
            // Out of room in the node's shared memory (tmpfs) or in memory.
            return Err(close(oom()));
        }
        // SAFETY: a fresh shared mapping of the whole file (len bytes, just sized).
        let raw = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if raw == libc::MAP_FAILED {
            return Err(close(os_error("mmap of node-shared memory")));
        }
        let Some(ptr) = NonNull::new(raw.cast::<u8>()) else {
            return Err(close(Error::invalid("mmap returned a null mapping")));
        };
        // SAFETY: an all-zero stat buffer is a valid value; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor of this process and a stat buffer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = os_error("fstat of node-shared memory");
            // SAFETY: the mapping just made.
            unsafe { libc::munmap(raw, len) };
            return Err(close(e));
        }
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = SegmentId { fd: fd as u64, ino: st.st_ino, len: len as u64, serial };
        registry().insert(ptr.as_ptr() as usize, id);
        Ok(Segment { ptr, len, fd })
    }
}

/// A new array of `shape` on `backend`, filled with `fill` (zeros when `None`). On the CPU
/// backend its memory is a shared mapping that the other processes of the node can map, so
/// that [`crate::HaloUpdater::on_node`] updaters copy halos straight between such
/// quantities of neighbouring ranks; on other backends, and for an empty shape, it is an
/// ordinary allocation ([`NDBuffer::create`]).
///
/// # Errors
/// [`Error::OutOfMemory`] when the bytes overflow, exceed the memory the system has
/// available, or the node's shared memory cannot hold them; [`Error::InvalidArgument`] when the operating system refuses the mapping; the
/// errors of [`NDBuffer::create`].
pub fn node_buffer<B, T>(
    backend: &B,
    shape: &[usize],
    order: Order,
    fill: Option<T>,
) -> Result<NDBuffer<B, T>>
where
    B: Kernels + 'static,
    B::Memory: 'static,
    T: Element,
{
    let bytes = shape
        .iter()
        .try_fold(T::DTYPE.size(), |n, &d| n.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or(Error::OutOfMemory { requested: usize::MAX, available: None, pool: None })?;
    if bytes == 0 || (backend as &dyn Any).downcast_ref::<gpubuf_cpu::CpuBackend>().is_none() {
        return NDBuffer::create(backend, shape, order, fill);
    }
    // A memfd file may grow past the machine's memory: reserving its pages would then wake
    // the kernel's out-of-memory killer instead of failing. Requests above what the
    // system has available now are refused first (several at once can still exhaust it).
    if let Some(info) = backend.memory_info() {
        if bytes as u64 > info.free {
            let available = usize::try_from(info.free).ok();
            return Err(Error::OutOfMemory { requested: bytes, available, pool: None });
        }
    }
    let segment = Segment::new(bytes)?;
    let ptr = segment.ptr;
    // SAFETY: the mapping is `bytes` bytes, readable and writeable, zero-initialised (a
    // fresh file), page-aligned; `segment` is the owner and unmaps it only when the
    // adopting memory drops. Nothing in this process reaches the bytes but through the
    // adopting memory; other processes read them only while this rank's updater waits for
    // them to finish, holding the only handles of the memory (see `HaloUpdater::on_node`),
    // and never write them.
    let memory = unsafe { CpuMemory::adopt_raw(ptr, bytes, Box::new(segment))? };
    let boxed: Box<dyn Any> = Box::new(memory);
    let memory = *boxed.downcast::<B::Memory>().map_err(|_| Error::invalid("CPU memory of another type"))?;
    let array = NDBuffer::from_buffer(Buffer::from_memory(backend, memory), shape, order)?;
    if let Some(v) = fill {
        array.fill(v)?;
    }
    Ok(array)
}

/// A neighbour's segment mapped read-only into this process.
pub(crate) struct PeerMap {
    pub id: SegmentId,
    pub ptr: *const u8,
    /// Whether the last message used it (unused mappings are dropped after each message).
    pub used: bool,
}

impl Drop for PeerMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `map_peer`, `id.len` bytes, unmapped once.
        unsafe { libc::munmap(self.ptr.cast_mut().cast(), self.id.len as usize) };
    }
}

/// Maps segment `id` of process `pid` read-only.
///
/// # Errors
/// [`Error::InvalidArgument`] when the file cannot be opened (no permission, the process or
/// descriptor is gone), is not the named one (another inode), is shorter than named, or
/// cannot be mapped.
pub(crate) fn map_peer(pid: u64, id: SegmentId) -> Result<PeerMap> {
    let len = usize::try_from(id.len).ok().filter(|&l| l > 0 && l <= isize::MAX as usize);
    let len = len.ok_or_else(|| Error::invalid("a neighbour named a segment of an impossible length"))?;
    let path = CString::new(format!("/proc/{pid}/fd/{}", id.fd)).map_err(|_| Error::invalid("path"))?;
    // SAFETY: a NUL-terminated path; read-only, close-on-exec.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(os_error(&format!("opening a neighbour's node-shared memory ({path:?})")));
    }
    // SAFETY: an all-zero stat buffer is a valid value; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor just opened and a stat buffer.
    let stat_ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    let fits = stat_ok && st.st_ino == id.ino && u64::try_from(st.st_size).is_ok_and(|s| s >= id.len);
    let raw = if fits {
        // SAFETY: a read-only shared mapping of `len` bytes of a file at least that long
        // (checked just above; the file never shrinks: its owner only ever unmaps it).
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd, 0) }
    } else {
        libc::MAP_FAILED
    };
    let e = (raw == libc::MAP_FAILED).then(|| os_error("mapping a neighbour's node-shared memory"));
    // SAFETY: the descriptor opened above, closed once (the mapping stays valid).
    unsafe { libc::close(fd) };
    if !fits {
        return Err(Error::invalid("a neighbour's node-shared memory is gone or is not the one it named"));
    }
    match (e, NonNull::new(raw.cast::<u8>())) {
        (None, Some(p)) => Ok(PeerMap { id, ptr: p.as_ptr().cast_const(), used: true }),
        (Some(e), _) => Err(e),
        (None, None) => Err(Error::invalid("mmap returned a null mapping")),
    }
}

/// A probe segment for setup: `(segment, its id)` holding `magic` in its first 8 bytes.
pub(crate) struct Probe {
    segment: Segment,
}

impl Probe {
    /// A one-page segment holding `magic`.
    ///
    /// # Errors
    /// As [`node_buffer`].
    pub(crate) fn new(magic: u64) -> Result<Self> {
        let segment = Segment::new(4096)?;
        // SAFETY: the first 8 bytes of a fresh, page-aligned, writeable mapping of 4096
        // bytes that nothing else in this process reaches.
        unsafe { segment.ptr.as_ptr().cast::<u64>().write(magic) };
        Ok(Probe { segment })
    }

    /// The id a neighbour maps it by.
    pub(crate) fn id(&self) -> Option<SegmentId> {
        lookup(self.segment.ptr.as_ptr())
    }
}

/// Whether this process can map segment `id` of `pid` and read `magic` there.
pub(crate) fn can_read(pid: u64, id: SegmentId, magic: u64) -> bool {
    match map_peer(pid, id) {
        // SAFETY: the first 8 bytes of a page-aligned read-only mapping of at least 4096
        // bytes (the probe's length, checked by `map_peer` against the file).
        Ok(m) => id.len >= 8 && unsafe { m.ptr.cast::<u64>().read_volatile() } == magic,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubuf_cpu::CpuBackend;

    #[test]
    fn node_buffers_are_registered_mappable_and_released() -> Result<()> {
        let b = CpuBackend::new();
        let a = node_buffer::<_, f64>(&b, &[3, 4], Order::C, Some(2.5))?;
        assert_eq!(a.to_vec()?, vec![2.5; 12]);
        let storage = a.storage();
        let cpu: &dyn Any = storage.memory;
        let ptr = cpu.downcast_ref::<CpuMemory>().map(CpuMemory::as_ptr).expect("CPU memory");
        let id = lookup(ptr).expect("registered");
        assert_eq!(id.len, 96);
        // This process maps its own segment as a neighbour would, and sees its values.
        let pid = u64::from(std::process::id());
        let m = map_peer(pid, id)?;
        // SAFETY: the first 8 bytes of a read-only mapping of 96 bytes.
        assert_eq!(unsafe { m.ptr.cast::<f64>().read() }, 2.5);
        // Another inode, or a longer length, under the same descriptor is refused.
        assert!(map_peer(pid, SegmentId { ino: id.ino + 1, ..id }).is_err());
        assert!(map_peer(pid, SegmentId { len: id.len + 4096, ..id }).is_err());
        assert!(map_peer(pid, SegmentId { len: 0, ..id }).is_err());
        drop(a);
        assert!(lookup(ptr).is_none());
        // The neighbour's mapping outlives the owner's: still readable.
        // SAFETY: as above; the pages live while mapped.
        assert_eq!(unsafe { m.ptr.cast::<f64>().read() }, 2.5);
        Ok(())
    }

    #[test]
    fn sizes_that_cannot_exist_are_typed_errors() -> Result<()> {
        let b = CpuBackend::new();
        let huge = node_buffer::<_, f64>(&b, &[usize::MAX, 2], Order::C, None);
        assert!(matches!(huge, Err(Error::OutOfMemory { .. })), "{huge:?}");
        let past = node_buffer::<_, u8>(&b, &[1 << 62, 4], Order::C, None);
        assert!(matches!(past, Err(Error::OutOfMemory { .. })), "{past:?}");
        // Past the machine's memory without overflowing: refused before a page is taken
        // (reserving them would wake the out-of-memory killer).
        if let Some(info) = gpubuf_core::Allocator::memory_info(&b) {
            let elems = usize::try_from(info.total / 8 * 2).unwrap_or(usize::MAX / 16);
            let more = node_buffer::<_, f64>(&b, &[elems], Order::C, None);
            assert!(matches!(more, Err(Error::OutOfMemory { available: Some(_), .. })), "{more:?}");
        }
        // Empty: an ordinary (empty) array, not a segment.
        let empty = node_buffer::<_, f32>(&b, &[0, 5], Order::C, None)?;
        assert_eq!(empty.shape(), &[0, 5]);
        Ok(())
    }

    #[test]
    fn probes_are_readable_by_this_process() -> Result<()> {
        let probe = Probe::new(77)?;
        let id = probe.id().expect("registered");
        let pid = u64::from(std::process::id());
        assert!(can_read(pid, id, 77));
        assert!(!can_read(pid, id, 78));
        assert!(!can_read(pid, SegmentId { fd: u64::MAX >> 1, ..id }, 77));
        Ok(())
    }
}
