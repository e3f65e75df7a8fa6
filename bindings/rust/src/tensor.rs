//! Element types and the caller's memory handed to cohort: [`Tensor`] borrows a slice to read
//! (inputs of a step, a parameter to set), [`TensorMut`] borrows one to be written (outputs of an
//! evaluation, a batch from a sampler). Each pairs the slice with a graph value's name and a
//! shape; the C library checks that the slice holds exactly the shape's elements and reports
//! any mismatch with its own message.
//!
//! The borrow lasts as long as the tensor, and every call that uses one finishes with the memory
//! before it returns (collectives, which do not, live in [`crate::comm`]).

use std::ffi::CString;
use std::marker::PhantomData;
use std::os::raw::c_void;

use crate::error::{c_count, Error, Result, Status};
use crate::sys;

/// Element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// bf16 storage; CPU math accumulates in f32.
    Bf16,
    /// Indices and labels.
    I32,
    I64,
    F16,
}

impl DType {
    pub(crate) fn to_raw(self) -> sys::cohort_dtype {
        match self {
            DType::F32 => sys::cohort_dtype::COHORT_F32,
            DType::Bf16 => sys::cohort_dtype::COHORT_BF16,
            DType::I32 => sys::cohort_dtype::COHORT_I32,
            DType::I64 => sys::cohort_dtype::COHORT_I64,
            DType::F16 => sys::cohort_dtype::COHORT_F16,
        }
    }

    pub(crate) fn from_raw(raw: sys::cohort_dtype) -> Result<DType> {
        Ok(match raw {
            sys::cohort_dtype::COHORT_F32 => DType::F32,
            sys::cohort_dtype::COHORT_BF16 => DType::Bf16,
            sys::cohort_dtype::COHORT_I32 => DType::I32,
            sys::cohort_dtype::COHORT_I64 => DType::I64,
            sys::cohort_dtype::COHORT_F16 => DType::F16,
            other => {
                return Err(Error::new(
                    Status::Unsupported,
                    format!("dtype {} is unknown to this binding", other.0),
                ))
            }
        })
    }

    /// Size of one element in bytes, as the library reports it.
    pub fn size(self) -> usize {
        // SAFETY: cohort_dtype_size never fails.
        unsafe { sys::cohort_dtype_size(self.to_raw()) }
    }
}

/// A bfloat16 value (its bits); converts to and from f32.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Rounds to the nearest bf16 (ties to even); NaN stays NaN.
    pub fn from_f32(value: f32) -> Bf16 {
        let bits = value.to_bits();
        if value.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x40);
        }
        let round = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(round) >> 16) as u16)
    }

    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

/// An IEEE half-precision value (its bits), for collectives over f16 buffers.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for super::Bf16 {}
    impl Sealed for super::F16 {}
}

/// A Rust type whose memory layout is one of cohort's dtypes. Tensors, collectives and
/// registered memory take slices of these only, so the element type always is the dtype the
/// library is told: a slice of another type (bytes, f64) is refused when the program compiles,
/// never read by its byte count as another dtype. Convert first (`x as f32`).
///
/// ```
/// let x = vec![0f32; 4 * 784];
/// let t = cohort::Tensor::new("x", &x, &[4, 784]);
/// assert_eq!(t.dtype(), cohort::DType::F32);
/// ```
///
/// ```compile_fail
/// let pixels = vec![0u8; 4 * 784];
/// let t = cohort::Tensor::new("x", &pixels, &[4, 784]); // error: u8 is not an Element
/// ```
///
/// ```compile_fail
/// let x = vec![0f64; 4 * 784];
/// let t = cohort::Tensor::new("x", &x, &[4, 784]); // error: f64 is not an Element
/// ```
///
/// ```compile_fail
/// # fn main() -> cohort::Result<()> {
/// let comm = cohort::Comm::from_env(&Default::default())?;
/// let mut counts = vec![0u8; 16];
/// comm.all_reduce_in_place(&mut counts, cohort::ReduceOp::Sum) // error: u8 is not an Element
/// # }
/// ```
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    const DTYPE: DType;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;
}
impl Element for F16 {
    const DTYPE: DType = DType::F16;
}

/// A shape kept inline up to rank 8 (the most an input may have), so binding a tensor does not
/// allocate for it; longer shapes are kept so that the library can report them.
#[derive(Clone, Debug)]
enum Shape {
    Inline { dims: [i64; 8], rank: usize },
    Heap(Vec<i64>),
}

impl Shape {
    fn new(dims: &[i64]) -> Shape {
        if dims.len() <= 8 {
            let mut inline = [0; 8];
            inline[..dims.len()].copy_from_slice(dims);
            Shape::Inline { dims: inline, rank: dims.len() }
        } else {
            Shape::Heap(dims.to_vec())
        }
    }

    fn as_slice(&self) -> &[i64] {
        match self {
            Shape::Inline { dims, rank } => &dims[..*rank],
            Shape::Heap(dims) => dims,
        }
    }
}

/// A name as the C string the library reads; a NUL inside is reported when the tensor is used.
#[derive(Clone, Debug)]
enum Name {
    Valid(CString),
    Invalid(String),
}

impl Name {
    fn new(name: &str) -> Name {
        match CString::new(name) {
            Ok(c) => Name::Valid(c),
            Err(_) => Name::Invalid(name.to_owned()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Name::Valid(c) => c.to_str().unwrap_or(""),
            Name::Invalid(s) => s,
        }
    }
}

/// The parts shared by Tensor and TensorMut.
#[derive(Clone, Debug)]
struct Binding {
    name: Name,
    dtype: DType,
    shape: Shape,
    data: *mut c_void,
    bytes: usize,
}

impl Binding {
    fn new<T: Element>(name: &str, data: *mut T, len: usize, shape: &[i64]) -> Binding {
        Binding {
            name: Name::new(name),
            dtype: T::DTYPE,
            shape: Shape::new(shape),
            data: data.cast(),
            bytes: len * std::mem::size_of::<T>(),
        }
    }

    /// The C description, pointing into self: valid while self is neither moved nor dropped.
    fn raw(&self) -> Result<sys::cohort_tensor_ref> {
        let name = match &self.name {
            Name::Valid(c) => c.as_ptr(),
            Name::Invalid(s) => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("tensor name {:?} contains a NUL byte", s),
                ))
            }
        };
        let shape = self.shape.as_slice();
        Ok(sys::cohort_tensor_ref {
            name,
            dtype: self.dtype.to_raw(),
            rank: c_count(shape.len(), "tensor rank")?,
            shape: shape.as_ptr(),
            data: self.data,
            bytes: self.bytes,
        })
    }

    fn data<T: Element>(&self) -> Option<(*mut T, usize)> {
        if T::DTYPE != self.dtype {
            return None;
        }
        Some((self.data.cast(), self.bytes / std::mem::size_of::<T>()))
    }
}

/// A borrowed slice read by cohort: a graph input or a parameter's values, by name and shape.
///
/// The slice stays borrowed while the tensor lives, so it cannot change or go away under it:
///
/// ```compile_fail
/// let mut x = vec![0f32; 4];
/// let t = cohort::Tensor::new("x", &x, &[4]);
/// x.clear(); // error: `x` is borrowed by `t`
/// drop(t);
/// ```
#[derive(Clone, Debug)]
pub struct Tensor<'a> {
    binding: Binding,
    borrow: PhantomData<&'a [u8]>,
}

// SAFETY: a Tensor is a shared borrow of Sync elements plus an owned name and shape, so it may
// move to, and be read from, any thread.
unsafe impl Send for Tensor<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for Tensor<'_> {}

impl<'a> Tensor<'a> {
    /// Binds `data` to the graph value `name` with `shape` (dimension 0 first). Neither the name
    /// nor the shape is checked here: the call that uses the tensor reports any problem.
    pub fn new<T: Element>(name: &str, data: &'a [T], shape: &[i64]) -> Tensor<'a> {
        Tensor {
            binding: Binding::new(name, data.as_ptr() as *mut T, data.len(), shape),
            borrow: PhantomData,
        }
    }

    pub fn name(&self) -> &str {
        self.binding.name.as_str()
    }
    pub fn dtype(&self) -> DType {
        self.binding.dtype
    }
    pub fn shape(&self) -> &[i64] {
        self.binding.shape.as_slice()
    }

    /// The borrowed elements, if they are of type T.
    pub fn data<T: Element>(&self) -> Option<&'a [T]> {
        // SAFETY: the binding was made from a &'a [U] with U::DTYPE == T::DTYPE, so U == T.
        self.binding
            .data::<T>()
            .map(|(ptr, len)| unsafe { std::slice::from_raw_parts(ptr as *const T, len) })
    }
}

/// A mutably borrowed slice written by cohort: an evaluation's output, a parameter read back, a
/// batch drawn from a dataset. It can also be read as an input (see [`AsTensorRef`]), so one
/// array of them can take a batch from a sampler and then feed a step.
#[derive(Debug)]
pub struct TensorMut<'a> {
    binding: Binding,
    borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: a TensorMut is an exclusive borrow of Send + Sync elements plus an owned name and
// shape; writing needs &mut self, so shared references only read.
unsafe impl Send for TensorMut<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for TensorMut<'_> {}

impl<'a> TensorMut<'a> {
    /// Binds `data` to the graph value `name` with `shape`, to be written.
    pub fn new<T: Element>(name: &str, data: &'a mut [T], shape: &[i64]) -> TensorMut<'a> {
        TensorMut {
            binding: Binding::new(name, data.as_mut_ptr(), data.len(), shape),
            borrow: PhantomData,
        }
    }

    pub fn name(&self) -> &str {
        self.binding.name.as_str()
    }
    pub fn dtype(&self) -> DType {
        self.binding.dtype
    }
    pub fn shape(&self) -> &[i64] {
        self.binding.shape.as_slice()
    }

    /// The elements, if they are of type T.
    pub fn data<T: Element>(&self) -> Option<&[T]> {
        // SAFETY: made from a &'a mut [T] (dtype equality implies the same type); shared access
        // through &self cannot overlap with the exclusive access of data_mut.
        self.binding
            .data::<T>()
            .map(|(ptr, len)| unsafe { std::slice::from_raw_parts(ptr as *const T, len) })
    }

    /// The elements for writing, if they are of type T.
    pub fn data_mut<T: Element>(&mut self) -> Option<&mut [T]> {
        // SAFETY: as for data, with exclusive access through &mut self.
        self.binding
            .data::<T>()
            .map(|(ptr, len)| unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }

    pub(crate) fn raw_mut(&mut self) -> Result<sys::cohort_tensor_ref> {
        self.binding.raw()
    }
}

/// Anything cohort may read as a named tensor: [`Tensor`] and [`TensorMut`].
pub trait AsTensorRef: sealed_ref::Sealed {
    #[doc(hidden)]
    fn raw_ref(&self) -> Result<sys::cohort_tensor_ref>;
}

mod sealed_ref {
    pub trait Sealed {}
    impl Sealed for super::Tensor<'_> {}
    impl Sealed for super::TensorMut<'_> {}
}

impl AsTensorRef for Tensor<'_> {
    fn raw_ref(&self) -> Result<sys::cohort_tensor_ref> {
        self.binding.raw()
    }
}

impl AsTensorRef for TensorMut<'_> {
    fn raw_ref(&self) -> Result<sys::cohort_tensor_ref> {
        self.binding.raw()
    }
}

/// An empty slot of the array handed to C.
const EMPTY_REF: sys::cohort_tensor_ref = sys::cohort_tensor_ref {
    name: std::ptr::null(),
    dtype: sys::cohort_dtype::COHORT_F32,
    rank: 0,
    shape: std::ptr::null(),
    data: std::ptr::null_mut(),
    bytes: 0,
};

/// Up to this many tensors are described on the stack; more take one allocation.
const INLINE_REFS: usize = 8;

/// Calls `f` with the C array describing `tensors` (pointing into them, so valid during `f`).
pub(crate) fn with_refs<B: AsTensorRef, R>(
    tensors: &[B],
    f: impl FnOnce(*const sys::cohort_tensor_ref, i32) -> R,
) -> Result<R> {
    let count = c_count(tensors.len(), "number of tensors")?;
    if tensors.len() <= INLINE_REFS {
        let mut refs = [EMPTY_REF; INLINE_REFS];
        for (slot, tensor) in refs.iter_mut().zip(tensors) {
            *slot = tensor.raw_ref()?;
        }
        Ok(f(refs.as_ptr(), count))
    } else {
        let refs = tensors.iter().map(|t| t.raw_ref()).collect::<Result<Vec<_>>>()?;
        Ok(f(refs.as_ptr(), count))
    }
}

/// Like with_refs, for tensors the call writes into.
pub(crate) fn with_refs_mut<R>(
    tensors: &mut [TensorMut<'_>],
    f: impl FnOnce(*mut sys::cohort_tensor_ref, i32) -> R,
) -> Result<R> {
    let count = c_count(tensors.len(), "number of tensors")?;
    if tensors.len() <= INLINE_REFS {
        let mut refs = [EMPTY_REF; INLINE_REFS];
        for (slot, tensor) in refs.iter_mut().zip(tensors.iter_mut()) {
            *slot = tensor.raw_mut()?;
        }
        Ok(f(refs.as_mut_ptr(), count))
    } else {
        let mut refs = tensors.iter_mut().map(|t| t.raw_mut()).collect::<Result<Vec<_>>>()?;
        Ok(f(refs.as_mut_ptr(), count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trips_and_rounds_to_nearest_even() {
        assert_eq!(Bf16::from_f32(1.0).to_f32(), 1.0);
        assert_eq!(Bf16::from_f32(-2.5).to_f32(), -2.5);
        // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even 1.
        assert_eq!(Bf16::from_f32(1.0 + 1.0 / 256.0).to_f32(), 1.0);
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
    }

    #[test]
    fn shapes_and_slices_are_described_exactly() {
        let data = [1.0f32; 6];
        let t = Tensor::new("x", &data, &[2, 3]);
        let raw = t.raw_ref().unwrap();
        assert_eq!(raw.rank, 2);
        assert_eq!(raw.bytes, 24);
        assert_eq!(t.data::<f32>().unwrap().len(), 6);
        assert!(t.data::<i32>().is_none());
        let bad = Tensor::new("x\0y", &data, &[6]);
        assert_eq!(bad.raw_ref().unwrap_err().status(), Status::InvalidArgument);
    }
}
