//! The vocabulary of user kernels: the arguments of a launch and its work sizes, checked
//! before any backend sees them.
//!
//! Backends compile kernels from their own source language (OpenCL C for OpenCL, closures
//! over ndarray views for the CPU) and launch them on a gpubuf stream with a [`Launch`]
//! and a list of [`KernelArg`]s. Native launch APIs trust their caller (a wrong argument is
//! a crash or garbage); a backend checks the arguments against the kernel's signature and
//! the work sizes against the device's limits first, and reports a typed error.
//!
//! [`KernelArg`] is one kernel parameter. To pass arrays themselves (an `NDBuffer` of any
//! element type becomes its allocation, a `long` element offset and, on request, `long`
//! strides) and [`Scalar`]s, use `gpubuf_buffer::Args` (`gpubuf::Args`), which every
//! backend and `gpubuf::Device::kernel` launch with; its module documents the convention.
//!
//! ```
//! use gpubuf_core::kernel::Launch;
//!
//! let l = Launch::new(&[1024, 64])?.with_local(&[64, 4])?;
//! assert_eq!((l.work_items(), l.group_size()), (65536, Some(256)));
//! assert!(Launch::new(&[100])?.with_local(&[64]).is_err()); // 100 is not a multiple of 64
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::{Error, Result};

/// The most work dimensions a launch may have.
pub const MAX_WORK_DIMS: usize = 3;

/// One argument of a kernel launch, over a backend's memory type `M`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg<'a, M> {
    /// A device allocation (an OpenCL `__global`/`__constant` pointer parameter). A view
    /// with an offset is passed as the allocation plus an element offset argument.
    Memory(&'a M),
    /// A 32-bit signed integer (`int`).
    I32(i32),
    /// A 32-bit unsigned integer (`uint`).
    U32(u32),
    /// A 64-bit signed integer (`long`).
    I64(i64),
    /// A 64-bit unsigned integer (`ulong`).
    U64(u64),
    /// A 32-bit float (`float`).
    F32(f32),
    /// A 64-bit float (`double`).
    F64(f64),
    /// Work-group local memory of this many bytes (an OpenCL `__local` pointer parameter).
    Local(usize),
}

impl<M> KernelArg<'_, M> {
    /// The C name of a scalar argument's type (`"int"`, `"ulong"`, ...), `None` for memory
    /// and local memory.
    pub fn c_type(&self) -> Option<&'static str> {
        Some(match self {
            KernelArg::I32(_) => "int",
            KernelArg::U32(_) => "uint",
            KernelArg::I64(_) => "long",
            KernelArg::U64(_) => "ulong",
            KernelArg::F32(_) => "float",
            KernelArg::F64(_) => "double",
            KernelArg::Memory(_) | KernelArg::Local(_) => return None,
        })
    }

    /// What the argument is, for error messages.
    pub fn describe(&self) -> String {
        match self {
            KernelArg::Memory(_) => "a device buffer".into(),
            KernelArg::Local(n) => format!("{n} bytes of local memory"),
            scalar => format!("a scalar {}", scalar.c_type().unwrap_or("?")),
        }
    }
}

/// A scalar argument of a kernel launch, by its C type (OpenCL C names; CUDA C: `int`,
/// `unsigned int`, `long long`, `unsigned long long`, `float`, `double`).
///
/// ```
/// use gpubuf_core::kernel::Scalar;
///
/// assert_eq!(Scalar::from(0.5f64), Scalar::F64(0.5));
/// assert_eq!(Scalar::from(3u32).get::<u32>(), Some(3));
/// assert_eq!(Scalar::from(3u32).get::<i32>(), None); // no conversion between types
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// `int`.
    I32(i32),
    /// `uint` (`unsigned int`).
    U32(u32),
    /// `long` (CUDA: `long long`).
    I64(i64),
    /// `ulong` (CUDA: `unsigned long long`).
    U64(u64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
}

impl Scalar {
    /// The value as a [`KernelArg`] of any memory type.
    pub fn arg<'a, M>(self) -> KernelArg<'a, M> {
        match self {
            Scalar::I32(v) => KernelArg::I32(v),
            Scalar::U32(v) => KernelArg::U32(v),
            Scalar::I64(v) => KernelArg::I64(v),
            Scalar::U64(v) => KernelArg::U64(v),
            Scalar::F32(v) => KernelArg::F32(v),
            Scalar::F64(v) => KernelArg::F64(v),
        }
    }

    /// The OpenCL C name of its type (`"int"`, `"ulong"`, ...).
    pub fn c_type(self) -> &'static str {
        self.arg::<()>().c_type().unwrap_or("?")
    }

    /// The value as a `T`, when it holds one (no conversion: an `I32` is not an `i64`).
    pub fn get<T: ScalarValue>(self) -> Option<T> {
        T::from_scalar(self)
    }
}

/// A Rust type a [`Scalar`] holds: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`.
pub trait ScalarValue: Copy + Into<Scalar> {
    /// The value, when `s` holds this type.
    fn from_scalar(s: Scalar) -> Option<Self>;
}

macro_rules! scalar_value {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Scalar {
            fn from(v: $t) -> Self {
                Scalar::$v(v)
            }
        }
        impl ScalarValue for $t {
            fn from_scalar(s: Scalar) -> Option<Self> {
                match s {
                    Scalar::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}
scalar_value!(i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// The work sizes of a launch: a global size per dimension (1 to [`MAX_WORK_DIMS`]) and
/// optionally a work-group size per dimension that divides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    global: Vec<usize>,
    local: Option<Vec<usize>>,
}

fn product(sizes: &[usize], what: &str) -> Result<usize> {
    sizes
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| Error::invalid(format!("{what} sizes {sizes:?} overflow")))
}

impl Launch {
    /// A launch of `global` work-items per dimension; the backend picks work-groups.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no or more than [`MAX_WORK_DIMS`] dimensions, a zero
    /// size, or a total that overflows `usize`.
    pub fn new(global: &[usize]) -> Result<Self> {
        if global.is_empty() || global.len() > MAX_WORK_DIMS {
            return Err(Error::invalid(format!(
                "a launch has 1 to {MAX_WORK_DIMS} dimensions, not {}",
                global.len()
            )));
        }
        if global.contains(&0) {
            return Err(Error::invalid(format!("global size {global:?} has a zero dimension")));
        }
        product(global, "global")?;
        Ok(Launch { global: global.to_vec(), local: None })
    }

    /// The same launch in work-groups of `local` work-items per dimension.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `local` has another number of dimensions, a zero
    /// size, a size that does not divide the global size, or a total that overflows.
    pub fn with_local(mut self, local: &[usize]) -> Result<Self> {
        if local.len() != self.global.len() {
            return Err(Error::invalid(format!(
                "local size {local:?} has {} dimensions, global size {:?} has {}",
                local.len(),
                self.global,
                self.global.len()
            )));
        }
        if local.contains(&0) {
            return Err(Error::invalid(format!("local size {local:?} has a zero dimension")));
        }
        if let Some(d) = (0..local.len()).find(|&d| self.global[d] % local[d] != 0) {
            return Err(Error::invalid(format!(
                "global size {} is not a multiple of local size {} in dimension {d}",
                self.global[d], local[d]
            )));
        }
        product(local, "local")?;
        self.local = Some(local.to_vec());
        Ok(self)
    }

    /// Work-items per dimension.
    pub fn global(&self) -> &[usize] {
        &self.global
    }

    /// Work-group size per dimension, when chosen.
    pub fn local(&self) -> Option<&[usize]> {
        self.local.as_deref()
    }

    /// All work-items (cannot overflow: checked at construction).
    pub fn work_items(&self) -> usize {
        self.global.iter().product()
    }

    /// Work-items in one work-group, when chosen.
    pub fn group_size(&self) -> Option<usize> {
        self.local.as_ref().map(|l| l.iter().product())
    }

    /// Checks the launch against a device and kernel: at most `max_dims` dimensions, at
    /// most `max_group` work-items per group and `max_item[d]` along dimension `d`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the limit that is exceeded.
    pub fn check_limits(&self, max_dims: usize, max_group: usize, max_item: &[usize]) -> Result<()> {
        if self.global.len() > max_dims {
            return Err(Error::invalid(format!(
                "{} work dimensions, the device takes {max_dims}",
                self.global.len()
            )));
        }
        let Some(local) = &self.local else { return Ok(()) };
        let group = self.group_size().unwrap_or(1);
        if group > max_group {
            return Err(Error::invalid(format!(
                "work-group of {group} items ({local:?}), the kernel takes at most {max_group}"
            )));
        }
        for (d, (&l, &m)) in local.iter().zip(max_item).enumerate() {
            if l > m {
                return Err(Error::invalid(format!(
                    "local size {l} in dimension {d}, the device takes at most {m}"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        assert!(Launch::new(&[]).is_err());
        assert!(Launch::new(&[1, 1, 1, 1]).is_err());
        assert!(Launch::new(&[4, 0]).is_err());
        assert!(Launch::new(&[usize::MAX, 2]).is_err());
        let l = Launch::new(&[8, 6]).unwrap();
        assert!(l.clone().with_local(&[4]).is_err());
        assert!(l.clone().with_local(&[4, 0]).is_err());
        assert!(l.clone().with_local(&[3, 3]).is_err());
        let l = l.with_local(&[4, 3]).unwrap();
        assert_eq!((l.work_items(), l.group_size(), l.local()), (48, Some(12), Some(&[4, 3][..])));
        assert!(l.check_limits(3, 12, &[4, 3, 1]).is_ok());
        assert!(l.check_limits(1, 12, &[4, 3, 1]).is_err());
        assert!(l.check_limits(3, 11, &[4, 3, 1]).is_err());
        assert!(l.check_limits(3, 12, &[4, 2, 1]).is_err());
    }

    #[test]
    fn scalar_arguments_name_their_c_type() {
        let args: [KernelArg<'_, ()>; 3] = [KernelArg::U64(1), KernelArg::Memory(&()), KernelArg::Local(8)];
        assert_eq!(args.map(|a| a.c_type()), [Some("ulong"), None, None]);
        assert_eq!(KernelArg::<()>::F32(1.0).describe(), "a scalar float");
    }
}
