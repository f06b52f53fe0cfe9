//! `gpubuf.HaloFields`: the halo update of many fields at once over
//! [`gpubuf::HaloFields`], its specs compiled once. Fields of several element types are
//! grouped by type (one Rust set per type); arrays are converted as the transformer's
//! quantities are (`halo.rs`: `NDBuffer`s as they are, numpy arrays adopted on the CPU or
//! uploaded and written back).

use crate::backend::PyBackend;
use crate::dtype::{parse_dtype, AnyArray, Wrap};
use crate::errors::{invalid, to_py, IntoPy};
use crate::halo_source::{check_disjoint, check_write_back, numpy_quantity, source, Source};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::halo::{CubedSpherePartitioner, Partitioner, TilePartitioner};
use gpubuf::{DType, Device, Dim, Error, HaloField, HaloFields, NDBuffer, QuantityHaloSpec};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// The typed array an [`AnyArray`] holds, when it is of type `Self`, and a typed set
/// wrapped in [`AnyFields`].
trait Pick: Wrap {
    fn pick(a: &AnyArray) -> Option<&NDBuffer<Device, Self>>;
    fn any_fields(h: HaloFields<Device, Self>) -> AnyFields;
}

macro_rules! pick {
    ($($t:ty => $v:ident),*) => {$(
        impl Pick for $t {
            fn pick(a: &AnyArray) -> Option<&NDBuffer<Device, Self>> {
                match a {
                    AnyArray::$v(nd) => Some(nd),
                    _ => None,
                }
            }
            fn any_fields(h: HaloFields<Device, Self>) -> AnyFields {
                AnyFields::$v(h)
            }
        }
    )*};
}
pick!(u8 => U8, i32 => I32, u32 => U32, i64 => I64, i8 => I8, i16 => I16, u16 => U16, u64 => U64, half::f16 => F16, f32 => F32, f64 => F64, gpubuf_core::Bool => Bool,
    gpubuf_core::Complex<f32> => C64, gpubuf_core::Complex<f64> => C128);

/// A set of any element type.
enum AnyFields {
    U8(HaloFields<Device, u8>),
    I32(HaloFields<Device, i32>),
    U32(HaloFields<Device, u32>),
    I64(HaloFields<Device, i64>),
    I8(HaloFields<Device, i8>),
    I16(HaloFields<Device, i16>),
    U16(HaloFields<Device, u16>),
    U64(HaloFields<Device, u64>),
    /// `bool`
    Bool(HaloFields<Device, gpubuf_core::Bool>),
    F16(HaloFields<Device, half::f16>),
    F32(HaloFields<Device, f32>),
    F64(HaloFields<Device, f64>),
    /// `complex64`
    C64(HaloFields<Device, gpubuf_core::Complex<f32>>),
    /// `complex128`
    C128(HaloFields<Device, gpubuf_core::Complex<f64>>),
}

macro_rules! fdispatch {
    ($f:expr, $h:ident => $body:expr) => {
        match $f {
            AnyFields::U8($h) => $body,
            AnyFields::I32($h) => $body,
            AnyFields::U32($h) => $body,
            AnyFields::I64($h) => $body,
            AnyFields::I8($h) => $body,
            AnyFields::I16($h) => $body,
            AnyFields::U16($h) => $body,
            AnyFields::U64($h) => $body,
            AnyFields::Bool($h) => $body,
            AnyFields::F16($h) => $body,
            AnyFields::F32($h) => $body,
            AnyFields::F64($h) => $body,
            AnyFields::C64($h) => $body,
            AnyFields::C128($h) => $body,
        }
    };
}

/// The fields of one element type.
struct Group {
    dtype: DType,
    set: AnyFields,
    /// The field indices in this group, in order.
    members: Vec<usize>,
}

/// What a call does with each group's arrays.
#[derive(Clone, Copy)]
enum Op {
    Update,
    Pack(usize),
    Unpack(usize),
}

/// Runs `op` on one typed set with its arrays (`None`: only checks them).
fn run<T: Pick>(h: &mut HaloFields<Device, T>, arrays: &[AnyArray], op: Option<Op>) -> gpubuf::Result<()> {
    let mut typed: Vec<NDBuffer<Device, T>> = Vec::with_capacity(arrays.len());
    for a in arrays {
        let nd = T::pick(a).ok_or(Error::DTypeMismatch { expected: T::DTYPE, got: a.dtype() })?;
        typed.push(nd.clone());
    }
    match op {
        None => h.check(&typed.iter().collect::<Vec<_>>()),
        Some(Op::Update) => h.update(&mut typed.iter_mut().collect::<Vec<_>>()),
        Some(Op::Pack(k)) => h.pack(k, &typed.iter().collect::<Vec<_>>()),
        Some(Op::Unpack(k)) => h.unpack(k, &mut typed.iter_mut().collect::<Vec<_>>()),
    }
}

/// One field's spec: a `QuantityHaloSpec` (gpubuf's or pace's: read by its attributes),
/// or an array whose shape and dtype describe a centred C-contiguous field with `n_halo`
/// halo points on its horizontal `dims`.
fn spec_of(
    obj: &Bound<'_, PyAny>,
    n_halo: Option<usize>,
    dims: Option<&[String]>,
) -> PyResult<QuantityHaloSpec> {
    if obj.hasattr("n_points")? {
        let dtype = parse_dtype(&obj.getattr("dtype")?)?;
        let item = dtype.size() as isize; // 1 to 8 bytes
        let strides = obj
            .getattr("strides")?
            .extract::<Vec<isize>>()?
            .into_iter()
            .map(|s| (s > 0 && s % item == 0).then_some(s / item))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("a spec's strides are positive multiples of its itemsize"))?;
        let names: Vec<String> = obj.getattr("dims")?.extract()?;
        let spec = QuantityHaloSpec {
            n_halo: obj.getattr("n_points")?.extract()?,
            shape: obj.getattr("shape")?.extract()?,
            strides,
            dtype,
            origin: obj.getattr("origin")?.extract()?,
            extent: obj.getattr("extent")?.extract()?,
            dims: names.iter().map(|d| Dim::from_name(d)).collect(),
        };
        spec.layout().py()?;
        return Ok(spec);
    }
    let shape: Vec<usize> = obj
        .getattr("shape")
        .and_then(|s| s.extract())
        .map_err(|_| invalid("a field is a QuantityHaloSpec, an array, or a pair of them (a vector)"))?;
    let dtype = parse_dtype(&obj.getattr("dtype")?)?;
    let n = n_halo.ok_or_else(|| invalid("fields given as arrays need n_halo="))?;
    let names: Vec<String> = match dims {
        Some(d) => d.to_vec(),
        None => ["x", "y"]
            .iter()
            .map(|s| s.to_string())
            .chain(std::iter::repeat("z".into()))
            .take(shape.len())
            .collect(),
    };
    if names.len() != shape.len() {
        return Err(invalid(format!("{} dims for an array of {} axes", names.len(), shape.len())));
    }
    let dims: Vec<Dim> = names.iter().map(|d| Dim::from_name(d)).collect();
    let mut extent = Vec::with_capacity(shape.len());
    for (&s, d) in shape.iter().zip(&dims) {
        let halo = if d.is_horizontal() { n.checked_mul(2) } else { Some(0) };
        let e = halo.and_then(|h| s.checked_sub(h));
        extent.push(e.ok_or_else(|| {
            invalid(format!("shape {shape:?} is narrower than a halo of {n} on each side"))
        })?);
    }
    QuantityHaloSpec::centered(&dims, &extent, n, 0, dtype).py()
}

/// The one or two objects of a field entry: a list or tuple is a vector pair.
fn parts<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        let v: Vec<Bound<'py, PyAny>> = obj.extract()?;
        if v.len() != 2 {
            return Err(invalid(format!("{what}: a vector is a pair (x, y), not {} items", v.len())));
        }
        return Ok(v);
    }
    Ok(vec![obj.clone()])
}

/// A call's arrays grouped by dtype, and the uploaded numpy arrays with their copies.
type Converted = (Vec<Vec<AnyArray>>, Vec<(Py<PyAny>, AnyArray)>);

/// Halo updates of many fields at once, every boundary (edges and corners), built once:
/// ``HaloFields(fields, n_halo=None, dims=None, backend=None, periodic=True, tile=None,
/// cube=None, rank=0)``. Each field is a ``QuantityHaloSpec`` (gpubuf's or pace's), or an
/// array (numpy or ``NDBuffer``) whose shape and dtype describe it with ``n_halo`` halo
/// points on its horizontal ``dims`` (default ``("x", "y", "z", ...)``); a pair of them is
/// a vector field. Without ``tile``/``cube`` every boundary wraps onto the opposite side of
/// the same array (``update``); with ``tile=(ny, nx)`` (periodic when ``periodic``) or
/// ``cube=layout`` this is rank ``rank`` of that layout, exchanging one message per
/// neighbour (``pack``, ``message``, ``receive``, ``unpack``).
#[pyclass(name = "HaloFields", module = "gpubuf", frozen)]
pub struct PyHaloFields {
    groups: Mutex<Vec<Group>>,
    device: Device,
    /// Per field: its dtype and how many arrays it takes.
    fields: Vec<(DType, usize)>,
    /// The neighbour ranks, by link index.
    neighbors: Vec<usize>,
}

impl PyHaloFields {
    /// The arrays of one call, converted and grouped by dtype; the numpy arrays that were
    /// uploaded come back with their copies, to write an unpack into.
    fn arrays(&self, list: &Bound<'_, PyAny>) -> PyResult<Converted> {
        let items: Vec<Bound<'_, PyAny>> =
            list.extract().map_err(|_| invalid("arrays are a sequence, one entry per field"))?;
        if items.len() != self.fields.len() {
            return Err(to_py(Error::LengthMismatch {
                what: "halo field arrays (one entry per field, a pair for a vector)".into(),
                unit: "entries",
                expected: self.fields.len(),
                got: items.len(),
                elements: None,
            }));
        }
        let groups =
            self.groups.try_lock().ok_or_else(|| invalid("HaloFields is in use on another thread"))?;
        let mut per_field: Vec<Vec<AnyArray>> = Vec::with_capacity(items.len());
        let mut uploaded = Vec::new();
        // The numpy arrays met, by address, held for the call (no address reused meanwhile).
        let mut converted: Vec<(usize, AnyArray)> = Vec::new();
        let mut kept = Vec::new();
        for (i, (item, &(dtype, n))) in items.iter().zip(&self.fields).enumerate() {
            let objs = parts(item, &format!("field {i}"))?;
            if objs.len() != n {
                return Err(invalid(format!("field {i} takes {n} array(s), got {}", objs.len())));
            }
            let mut got = Vec::with_capacity(n);
            for o in &objs {
                match source(o)? {
                    Source::Gpubuf(a) if a.dtype() != dtype => {
                        return Err(to_py(Error::DTypeMismatch { expected: dtype, got: a.dtype() }))
                    }
                    Source::Gpubuf(a) => got.push(a),
                    Source::Numpy(arr) => {
                        // One numpy array given twice is one array (adopted or uploaded
                        // once), as in the transformer: the plans then see it twice.
                        let seen = converted.iter().find(|(p, _)| *p == arr.as_ptr() as usize);
                        if let Some((_, a)) = seen {
                            got.push(a.clone());
                            continue;
                        }
                        let (a, back) = numpy_quantity(&arr, &self.device, dtype)?;
                        if let Some(b) = back {
                            uploaded.push((b, a.clone()));
                        }
                        converted.push((arr.as_ptr() as usize, a.clone()));
                        kept.push(arr);
                        got.push(a);
                    }
                }
            }
            per_field.push(got);
        }
        check_disjoint(&per_field.iter().flatten().collect::<Vec<_>>())?;
        let grouped =
            groups.iter().map(|g| g.members.iter().flat_map(|&m| per_field[m].clone()).collect()).collect();
        Ok((grouped, uploaded))
    }

    /// Checks every group's arrays, then runs `op` on each, with the GIL released; then
    /// writes unpacked halos back into numpy arrays that were uploaded.
    fn call(&self, py: Python<'_>, list: &Bound<'_, PyAny>, op: Op) -> PyResult<()> {
        let (grouped, uploaded) = self.arrays(list)?;
        if !matches!(op, Op::Pack(_)) {
            // Refused before anything runs: the other fields would be written already.
            check_write_back(py, &uploaded.iter().map(|(t, _)| t).collect::<Vec<_>>())?;
        }
        let mut groups =
            self.groups.try_lock().ok_or_else(|| invalid("HaloFields is in use on another thread"))?;
        let groups = &mut *groups;
        py.detach(|| {
            for (g, a) in groups.iter_mut().zip(&grouped) {
                fdispatch!(&mut g.set, h => run(h, a, None))?;
            }
            for (g, a) in groups.iter_mut().zip(&grouped) {
                fdispatch!(&mut g.set, h => run(h, a, Some(op)))?;
            }
            groups.iter().try_for_each(|g| fdispatch!(&g.set, h => h.synchronize()))
        })
        .py()?;
        if matches!(op, Op::Pack(_)) || uploaded.is_empty() {
            return Ok(());
        }
        let np = py.import("numpy")?;
        for (target, array) in &uploaded {
            let host = PyNDBuffer::to_numpy(&Bound::new(py, PyNDBuffer { array: array.clone() })?)?;
            np.call_method1("copyto", (target.bind(py), host))?;
        }
        Ok(())
    }

    fn lock(&self) -> PyResult<parking_lot::MutexGuard<'_, Vec<Group>>> {
        self.groups.try_lock().ok_or_else(|| invalid("HaloFields is in use on another thread"))
    }
}

#[pymethods]
impl PyHaloFields {
    /// Raises ``InvalidArgumentError`` for no fields, a field without halo points, arrays
    /// given without ``n_halo``, a bad layout or rank; ``DTypeMismatchError`` for a dtype
    /// gpubuf has no type for.
    #[new]
    #[pyo3(signature = (fields, n_halo = None, dims = None, backend = None, periodic = true, tile = None, cube = None, rank = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        fields: &Bound<'_, PyAny>,
        n_halo: Option<i128>,
        dims: Option<Vec<String>>,
        backend: Option<&PyBackend>,
        periodic: bool,
        tile: Option<(i128, i128)>,
        cube: Option<i128>,
        rank: i128,
    ) -> PyResult<Self> {
        // Python ints of any size: a negative or huge one is gpubuf's error, not pyo3's.
        let count = |v: i128, what: &str| {
            usize::try_from(v).map_err(|_| invalid(format!("{what} {v} is negative or too large")))
        };
        let n_halo = n_halo.map(|n| count(n, "n_halo")).transpose()?;
        let tile = tile.map(|(y, x)| Ok::<_, PyErr>((count(y, "tile")?, count(x, "tile")?))).transpose()?;
        let cube = cube.map(|c| count(c, "cube")).transpose()?;
        let rank = count(rank, "rank")?;
        let device = backend.map_or_else(Device::cpu, |b| b.device.clone());
        let items: Vec<Bound<'_, PyAny>> =
            fields.extract().map_err(|_| invalid("fields is a sequence of field descriptions"))?;
        let mut groups: Vec<(DType, Vec<usize>, Vec<HaloField>)> = Vec::new();
        let mut layout = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let specs = parts(item, &format!("field {i}"))?
                .iter()
                .map(|o| spec_of(o, n_halo, dims.as_deref()))
                .collect::<PyResult<Vec<_>>>()?;
            let dtype = specs[0].dtype;
            let field = match <[QuantityHaloSpec; 2]>::try_from(specs) {
                Ok([x, y]) => HaloField::Vector { x, y },
                Err(mut one) => HaloField::Scalar(one.remove(0)),
            };
            layout.push((dtype, field.arrays()));
            match groups.iter_mut().find(|g| g.0 == dtype) {
                Some(g) => {
                    g.1.push(i);
                    g.2.push(field);
                }
                None => groups.push((dtype, vec![i], vec![field])),
            }
        }
        if groups.is_empty() {
            return Err(invalid("HaloFields: no fields given"));
        }
        let partitioner: Option<Box<dyn Partitioner>> = match (tile, cube) {
            (Some(_), Some(_)) => return Err(invalid("give tile= or cube=, not both")),
            (Some(t), None) => Some(Box::new(TilePartitioner::new(t, periodic).py()?)),
            (None, Some(c)) => Some(Box::new(CubedSpherePartitioner::new(c).py()?)),
            (None, None) if periodic => None,
            (None, None) => return Err(invalid("periodic=False needs tile= or cube=")),
        };
        let dev = device.clone();
        let built = py
            .detach(move || {
                let mut out = Vec::with_capacity(groups.len());
                for (dtype, members, fields) in groups {
                    let set = crate::dtype::with_dtype!(dtype, T => {
                        let h = match &partitioner {
                            None => HaloFields::<Device, T>::periodic(&dev, fields)?,
                            Some(p) => HaloFields::<Device, T>::partitioned(&dev, fields, p.as_ref(), rank)?,
                        };
                        T::any_fields(h)
                    });
                    out.push(Group { dtype, set, members });
                }
                Ok::<_, Error>(out)
            })
            .py()?;
        let neighbors = fdispatch!(&built[0].set, h => h.links().iter().map(|l| l.rank).collect());
        Ok(PyHaloFields { groups: Mutex::new(built), device, fields: layout, neighbors })
    }

    /// The halo update of every field across every boundary of a periodic set: one entry
    /// per field in ``arrays`` (a pair ``(x, y)`` for a vector). Returns once done; numpy
    /// arrays that were uploaded are written back.
    ///
    /// Raises ``LengthMismatchError`` for another number of entries, ``ShapeMismatchError``,
    /// ``DTypeMismatchError``, ``DeviceMismatchError``, ``InvalidArgumentError`` for other
    /// strides or a set with neighbour ranks; nothing is changed then.
    fn update(&self, py: Python<'_>, arrays: &Bound<'_, PyAny>) -> PyResult<()> {
        self.call(py, arrays, Op::Update)
    }

    /// Packs neighbour ``k``'s message from ``arrays`` (``k`` indexes ``neighbors``).
    fn pack(&self, py: Python<'_>, k: usize, arrays: &Bound<'_, PyAny>) -> PyResult<()> {
        self.call(py, arrays, Op::Pack(k))
    }

    /// Unpacks neighbour ``k``'s received message into ``arrays``.
    fn unpack(&self, py: Python<'_>, k: usize, arrays: &Bound<'_, PyAny>) -> PyResult<()> {
        self.call(py, arrays, Op::Unpack(k))
    }

    /// The bytes of neighbour ``k``'s packed message (what to send it).
    fn message<'py>(&self, py: Python<'py>, k: usize) -> PyResult<Bound<'py, PyBytes>> {
        let groups = self.lock()?;
        let mut out = Vec::new();
        for g in groups.iter() {
            out.extend(fdispatch!(&g.set, h => h.read_message(k)).py()?);
        }
        Ok(PyBytes::new(py, &out))
    }

    /// Takes neighbour ``k``'s message (the bytes its ``message`` gave), for ``unpack``.
    ///
    /// Raises ``LengthMismatchError`` for another number of bytes.
    fn receive(&self, k: usize, data: &[u8]) -> PyResult<()> {
        let mut groups = self.lock()?;
        let lens = groups
            .iter()
            .map(|g| fdispatch!(&g.set, h => h.message_bytes(k)))
            .collect::<gpubuf::Result<Vec<_>>>()
            .py()?;
        let total: usize = lens.iter().sum();
        if data.len() != total {
            return Err(to_py(Error::byte_length(format!("message of link {k}"), total, data.len(), None)));
        }
        let mut at = 0;
        for (g, n) in groups.iter_mut().zip(lens) {
            fdispatch!(&mut g.set, h => h.receive_message(k, &data[at..at + n])).py()?;
            at += n;
        }
        Ok(())
    }

    /// The neighbour ranks, by link index (``[0]`` for a periodic set).
    #[getter]
    fn neighbors(&self) -> Vec<usize> {
        self.neighbors.clone()
    }

    /// The element types of the fields, in field order, as numpy dtypes.
    #[getter]
    fn dtypes<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, numpy::PyArrayDescr>> {
        self.fields.iter().map(|&(d, _)| crate::dtype::numpy_dtype(py, d)).collect()
    }

    /// The backend the fields live on.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.clone())
    }

    fn __len__(&self) -> usize {
        self.fields.len()
    }

    fn __repr__(&self) -> String {
        let groups =
            self.groups.try_lock().map(|g| g.iter().map(|g| g.dtype.name()).collect::<Vec<_>>().join(", "));
        format!(
            "gpubuf.HaloFields({} fields, dtypes [{}], neighbors {:?}, backend={:?})",
            self.fields.len(),
            groups.unwrap_or_default(),
            self.neighbors,
            self.device.kind().name()
        )
    }
}
