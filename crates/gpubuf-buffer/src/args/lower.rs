//! Checking [`Args`] for a launch and measuring its arrays from their allocations
//! ([`Args::lower`]), then expanding them to kernel parameters ([`expand`]).

use super::{Access, Arg, Args, ArrayArg};
use gpubuf_core::kernel::{KernelArg, Scalar};
use gpubuf_core::{Backend, DType, DeviceMemory, Error, Layout, Result};

impl<'a, B: Backend> Args<'a, B> {
    /// Checks the arguments for a kernel of `backend` and measures each array from its
    /// allocation's first byte; `memory` turns an allocation into the one the launching
    /// backend takes (`Some` for a backend's own type; the held backend's for a run-time
    /// device, `None` for another's).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for an array of another device (or another backend);
    /// [`Error::InvalidArgument`] for an array passed without strides that is not
    /// C-contiguous, or whose buffer does not start at a whole element;
    /// [`Error::OutOfBounds`] for a view reaching past its buffer or allocation.
    pub fn lower<N>(
        &self,
        backend: &B,
        mut memory: impl FnMut(&'a B::Memory) -> Option<&'a N>,
    ) -> Result<Vec<Part<'a, N>>> {
        let mut out = Vec::with_capacity(self.items.len());
        for (i, item) in self.items.iter().enumerate() {
            let a = match item {
                Arg::Scalar(s) => {
                    out.push(Part::Scalar(*s));
                    continue;
                }
                Arg::Array(a) => a,
            };
            let own = a.buffer.backend();
            let mismatch = || {
                Error::DeviceMismatch(format!(
                    "argument {i} ({}) is an array of another device ({} backend)",
                    item.describe(),
                    own.kind()
                ))
            };
            if !own.same_device(backend) {
                return Err(mismatch());
            }
            let whole: &'a B::Memory = a.buffer.memory();
            let mem = memory(whole).ok_or_else(mismatch)?;
            let layout = measure(i, a, whole.len())?;
            out.push(Part::Array(ArrayParts {
                memory: mem,
                layout,
                dtype: a.dtype,
                access: a.access,
                strided: a.strided,
            }));
        }
        Ok(out)
    }

    /// [`Args::lower`] against the device of the first array (every array must be on it);
    /// for a backend whose launch checks the device of each allocation itself.
    ///
    /// # Errors
    /// As [`Args::lower`].
    pub fn lower_together<N>(
        &self,
        memory: impl FnMut(&'a B::Memory) -> Option<&'a N>,
    ) -> Result<Vec<Part<'a, N>>> {
        let first = self.items.iter().find_map(|a| match a {
            Arg::Array(a) => Some(a.buffer.backend()),
            Arg::Scalar(_) => None,
        });
        match first {
            Some(b) => self.lower(b, memory),
            None => Ok(self
                .items
                .iter()
                .filter_map(|a| if let Arg::Scalar(s) = a { Some(Part::Scalar(*s)) } else { None })
                .collect()),
        }
    }
}

/// The layout of array argument `i` measured from its allocation's first element, after
/// checking it against its buffer and the allocation (`alloc_len` bytes).
fn measure<B: Backend>(i: usize, a: &ArrayArg<'_, B>, alloc_len: usize) -> Result<Layout> {
    let size = a.dtype.size();
    let (start, len) = (a.buffer.offset(), a.buffer.len());
    if start % size != 0 {
        return Err(Error::invalid(format!(
            "argument {i}: its buffer starts at byte {start} of its allocation, not a whole \
             {size}-byte element"
        )));
    }
    if start.checked_add(len).is_none_or(|end| end > alloc_len) {
        return Err(Error::OutOfBounds {
            what: "kernel array buffer".into(),
            start,
            end: start.saturating_add(len),
            len: alloc_len,
        });
    }
    a.layout.check_fits(len / size)?;
    if a.layout.size() == 0 {
        return Ok(a.layout.clone().with_offset(0));
    }
    if !a.strided && !a.layout.is_c_contiguous() {
        return Err(Error::invalid(format!(
            "argument {i} is not C-contiguous (shape {:?}, strides {:?}): pass it with its \
             strides (Arg::strided, Args::strided) or make a dense copy (NDBuffer::copy)",
            a.layout.shape(),
            a.layout.strides()
        )));
    }
    // Inside the buffer, which lies inside the allocation: no overflow, at most isize::MAX.
    let offset = (start / size)
        .checked_add(a.layout.offset())
        .ok_or_else(|| Error::invalid(format!("argument {i}: offset overflows")))?;
    let layout = a.layout.clone().with_offset(offset);
    layout.check_fits(alloc_len / size)?;
    Ok(layout)
}

/// An array argument measured from its allocation's first element, ready for a backend.
#[derive(Debug, Clone)]
pub struct ArrayParts<'a, M> {
    /// The allocation (the backend's own memory type).
    pub memory: &'a M,
    /// The view: its offset is the element offset of index `[0, ..]` in the allocation
    /// (`0` for an empty view), checked to lie inside it.
    pub layout: Layout,
    /// The element type.
    pub dtype: DType,
    /// Whether the kernel writes it.
    pub access: Access,
    /// Whether its strides are passed.
    pub strided: bool,
}

/// A checked argument ([`Args::lower`]).
#[derive(Debug, Clone)]
pub enum Part<'a, M> {
    /// An array.
    Array(ArrayParts<'a, M>),
    /// A scalar.
    Scalar(Scalar),
}

/// The kernel parameters of a list of checked arguments ([`expand`]).
#[derive(Debug, Clone)]
pub struct Expanded<'a, M> {
    /// One value per parameter.
    pub args: Vec<KernelArg<'a, M>>,
    /// Per parameter: the element type of an array's pointer, `None` for the others.
    pub pointer_dtypes: Vec<Option<DType>>,
    /// Per parameter: the index of the argument it comes from.
    pub origin: Vec<usize>,
    /// What each argument became, for error messages.
    pub summary: String,
}

impl<M> Expanded<'_, M> {
    /// `e` with the expansion appended to its message when it is an
    /// [`Error::InvalidArgument`] (a signature mismatch names parameters, not arguments).
    pub fn explain(&self, e: Error) -> Error {
        match e {
            Error::InvalidArgument(m) => Error::InvalidArgument(format!(
                "{m} (the {} parameters come from the arguments: {})",
                self.args.len(),
                self.summary
            )),
            e => e,
        }
    }
}

/// The parameters of `parts` (see the [module](super)): per array its allocation, its
/// element offset as `I64` and, when strided, one `I64` stride per axis; per scalar its
/// value.
///
/// # Errors
/// [`Error::InvalidArgument`] when an offset or stride does not fit `i64` (not possible
/// for views that [`Args::lower`] accepted).
pub fn expand<'a, M>(parts: &[Part<'a, M>]) -> Result<Expanded<'a, M>> {
    let mut e =
        Expanded { args: Vec::new(), pointer_dtypes: Vec::new(), origin: Vec::new(), summary: String::new() };
    for (i, p) in parts.iter().enumerate() {
        let first = e.args.len();
        match p {
            Part::Scalar(s) => {
                e.args.push(s.arg());
                e.pointer_dtypes.push(None);
                e.summary.push_str(&format!("#{i} {} -> param {first}; ", s.c_type()));
            }
            Part::Array(a) => {
                let long = |v: i128| {
                    i64::try_from(v)
                        .map_err(|_| Error::invalid(format!("argument {i}: {v} does not fit a long")))
                };
                e.args.push(KernelArg::Memory(a.memory));
                e.pointer_dtypes.push(Some(a.dtype));
                e.args.push(KernelArg::I64(long(a.layout.offset() as i128)?));
                e.pointer_dtypes.push(None);
                if a.strided {
                    for &s in a.layout.strides() {
                        e.args.push(KernelArg::I64(long(s as i128)?));
                        e.pointer_dtypes.push(None);
                    }
                }
                e.summary.push_str(&format!(
                    "#{i} {} array -> params {first}..={} (pointer, long offset{}); ",
                    a.dtype.name(),
                    e.args.len() - 1,
                    if a.strided { ", long strides" } else { "" }
                ));
            }
        }
        e.origin.resize(e.args.len(), i);
    }
    let trimmed = e.summary.trim_end_matches("; ").len();
    e.summary.truncate(trimmed);
    Ok(e)
}
