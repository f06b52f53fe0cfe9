//! The enums a [`super::Device`] hands out, one variant per compiled backend, and the
//! [`Variant`] trait that picks a backend's own type out of them.

use gpubuf_core::{BackendKind, CopyPlan, DType, DeviceMemory, Error, Kernels, PreparedPlan};
use std::sync::Arc;

macro_rules! part_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal, $cpu:ty, $cl:ty, $cuda:ty, $($derive:ident),*) => {
        part_enum!($(#[$doc])* $name, $what, $cpu, $cl, $cuda, $cpu, $cl, $cuda, $($derive),*);
    };
    ($(#[$doc:meta])* $name:ident, $what:literal, $cpu:ty, $cl:ty, $cuda:ty,
     $vcpu:ty, $vcl:ty, $vcuda:ty, $($derive:ident),*) => {
        $(#[$doc])*
        #[derive(Debug, $($derive),*)]
        pub enum $name {
            #[doc = concat!("A ", $what, " of the CPU backend.")]
            Cpu($vcpu),
            #[doc = concat!("A ", $what, " of the OpenCL backend.")]
            #[cfg(feature = "opencl")]
            OpenCl($vcl),
            #[doc = concat!("A ", $what, " of the CUDA backend.")]
            #[cfg(feature = "cuda")]
            Cuda($vcuda),
        }

        impl $name {
            #[doc = concat!("The backend this ", $what, " belongs to.")]
            pub fn kind(&self) -> BackendKind {
                match self {
                    $name::Cpu(_) => BackendKind::Cpu,
                    #[cfg(feature = "opencl")]
                    $name::OpenCl(_) => BackendKind::OpenCl,
                    #[cfg(feature = "cuda")]
                    $name::Cuda(_) => BackendKind::Cuda,
                }
            }

            #[doc = concat!("The CPU backend's ", $what, ", when it is one.")]
            pub fn as_cpu(&self) -> Option<&$cpu> {
                match self {
                    $name::Cpu(x) => Some(x),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }

            #[doc = concat!("The OpenCL backend's ", $what, ", when it is one.")]
            #[cfg(feature = "opencl")]
            pub fn as_opencl(&self) -> Option<&$cl> {
                match self {
                    $name::OpenCl(x) => Some(x),
                    _ => None,
                }
            }

            #[doc = concat!("The CUDA backend's ", $what, ", when it is one.")]
            #[cfg(feature = "cuda")]
            pub fn as_cuda(&self) -> Option<&$cuda> {
                match self {
                    $name::Cuda(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}

part_enum!(
    /// An allocation of a [`super::Device`]: the chosen backend's own memory, shared (the
    /// same allocation is a `Buffer<Device>` and a buffer of the concrete backend at once,
    /// see `Buffer::to_backend`).
    Memory, "allocation", gpubuf_cpu::CpuMemory, gpubuf_opencl::ClMemory, gpubuf_cuda::CudaMemory,
    Arc<gpubuf_cpu::CpuMemory>, Arc<gpubuf_opencl::ClMemory>, Arc<gpubuf_cuda::CudaMemory>,
);
part_enum!(
    /// A stream of a [`super::Device`]. Cloning gives another handle to the same queue.
    Stream, "stream", gpubuf_cpu::CpuStream, gpubuf_opencl::ClStream, gpubuf_cuda::CudaStream, Clone
);
part_enum!(
    /// An event of a [`super::Device`].
    Event, "event", gpubuf_cpu::CpuEvent, gpubuf_opencl::ClEvent, gpubuf_cuda::CudaEvent,
);
part_enum!(
    /// A copy plan prepared by a [`super::Device`] (uploaded once by the chosen backend).
    Plan, "prepared plan", gpubuf_cpu::CpuPlan, gpubuf_opencl::ClPlan, gpubuf_cuda::CudaPlan,
);

impl DeviceMemory for Memory {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Memory::Cpu(m) => m.len(),
            #[cfg(feature = "opencl")]
            Memory::OpenCl(m) => m.len(),
            #[cfg(feature = "cuda")]
            Memory::Cuda(m) => m.len(),
        }
    }

    #[inline]
    /// The held allocation's identifier. Allocations of different backends may share one;
    /// ranges of different backends never meet in one operation (that is a
    /// [`Error::DeviceMismatch`]).
    fn id(&self) -> usize {
        match self {
            Memory::Cpu(m) => m.id(),
            #[cfg(feature = "opencl")]
            Memory::OpenCl(m) => m.id(),
            #[cfg(feature = "cuda")]
            Memory::Cuda(m) => m.id(),
        }
    }
}

impl PreparedPlan for Plan {
    #[inline]
    fn plan(&self) -> &CopyPlan {
        match self {
            Plan::Cpu(p) => p.plan(),
            #[cfg(feature = "opencl")]
            Plan::OpenCl(p) => p.plan(),
            #[cfg(feature = "cuda")]
            Plan::Cuda(p) => p.plan(),
        }
    }

    #[inline]
    fn dtype(&self) -> DType {
        match self {
            Plan::Cpu(p) => p.dtype(),
            #[cfg(feature = "opencl")]
            Plan::OpenCl(p) => p.dtype(),
            #[cfg(feature = "cuda")]
            Plan::Cuda(p) => p.dtype(),
        }
    }
}

/// The error for an object of backend `got` given to a device of backend `want`. Cold and
/// out of line, so the checks that call it stay small enough to inline into hot paths.
#[cold]
#[inline(never)]
pub(crate) fn mismatch(what: &str, got: BackendKind, want: BackendKind) -> Error {
    Error::DeviceMismatch(format!("{what} of the {got} backend given to a {want} device"))
}

/// A backend a [`super::Device`] can hold: how its own types go into and come out of the
/// device's enums.
pub(crate) trait Variant: Kernels {
    /// This backend's allocation, or `None` for another backend's.
    fn memory(m: &Memory) -> Option<&Self::Memory>;
    /// Wraps an allocation.
    fn wrap_memory(m: Self::Memory) -> Memory;
    /// This backend's allocation as it is shared, or `None` for another backend's.
    fn shared_memory(m: &Memory) -> Option<&Arc<Self::Memory>>;
    /// Wraps a shared allocation (no copy: both handles then name one allocation).
    fn wrap_shared(m: Arc<Self::Memory>) -> Memory;
    /// This backend's stream, or `None`.
    fn stream(s: &Stream) -> Option<&Self::Stream>;
    /// Wraps a stream.
    fn wrap_stream(s: Self::Stream) -> Stream;
    /// This backend's event, or `None`.
    fn event(e: &Event) -> Option<&Self::Event>;
    /// Wraps an event.
    fn wrap_event(e: Self::Event) -> Event;
    /// This backend's prepared plan, or `None`.
    fn plan(p: &Plan) -> Option<&Self::Plan>;
    /// Wraps a prepared plan.
    fn wrap_plan(p: Self::Plan) -> Plan;
}

macro_rules! variant {
    ($backend:ty, $v:ident) => {
        impl Variant for $backend {
            #[inline]
            fn memory(m: &Memory) -> Option<&Self::Memory> {
                match m {
                    Memory::$v(x) => Some(x),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            #[inline]
            fn wrap_memory(m: Self::Memory) -> Memory {
                Memory::$v(Arc::new(m))
            }
            #[inline]
            fn shared_memory(m: &Memory) -> Option<&Arc<Self::Memory>> {
                match m {
                    Memory::$v(x) => Some(x),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            #[inline]
            fn wrap_shared(m: Arc<Self::Memory>) -> Memory {
                Memory::$v(m)
            }
            #[inline]
            fn stream(s: &Stream) -> Option<&Self::Stream> {
                match s {
                    Stream::$v(x) => Some(x),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            #[inline]
            fn wrap_stream(s: Self::Stream) -> Stream {
                Stream::$v(s)
            }
            #[inline]
            fn event(e: &Event) -> Option<&Self::Event> {
                match e {
                    Event::$v(x) => Some(x),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            #[inline]
            fn wrap_event(e: Self::Event) -> Event {
                Event::$v(e)
            }
            #[inline]
            fn plan(p: &Plan) -> Option<&Self::Plan> {
                match p {
                    Plan::$v(x) => Some(x),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            #[inline]
            fn wrap_plan(p: Self::Plan) -> Plan {
                Plan::$v(p)
            }
        }
    };
}

variant!(gpubuf_cpu::CpuBackend, Cpu);
#[cfg(feature = "opencl")]
variant!(gpubuf_opencl::OpenClBackend, OpenCl);
#[cfg(feature = "cuda")]
variant!(gpubuf_cuda::CudaBackend, Cuda);
