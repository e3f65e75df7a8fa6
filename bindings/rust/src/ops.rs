//! Operator descriptions: what [`Graph::add_op`](crate::Graph::add_op) accepts for each public
//! operator — input names, output names, attributes with their types and defaults — read from the
//! library's operator registry (`cohort_op_describe`). The library's strings are copied, so the
//! descriptions own everything they hold.

use std::ffi::CStr;
use std::os::raw::c_char;

use crate::error::{c_string, check, Error, Result, Status};
use crate::sys;

/// What an attribute holds: the [`Attrs`](crate::Attrs) setter that gives it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttrType {
    Int,
    /// An integer is accepted too.
    Float,
    String,
    Ints,
    /// A list of integers is accepted too.
    Floats,
}

/// An attribute's value (here: the default used when an operator is added without it).
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f64),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

/// One attribute of an operator.
#[derive(Clone, Debug, PartialEq)]
pub struct OpAttr {
    pub name: String,
    pub kind: AttrType,
    /// Adding the operator fails without it.
    pub required: bool,
    /// The value used when it is not given; `None` when required.
    pub default: Option<AttrValue>,
}

/// What [`Graph::add_op`](crate::Graph::add_op) accepts for one operator.
#[derive(Clone, Debug, PartialEq)]
pub struct OpInfo {
    pub name: String,
    /// Input names in order; the first `min_inputs` must be given, the rest may be left out.
    pub inputs: Vec<String>,
    pub min_inputs: usize,
    /// Output names: output 0 is the result, later ones hold what the backward pass needs. With
    /// `outputs_from`, one name that every output shares.
    pub outputs: Vec<String>,
    /// The list attribute with one output per entry (split's "sizes"), if the count varies.
    pub outputs_from: Option<String>,
    pub attrs: Vec<OpAttr>,
}

/// Copies a C string of the library's operator table (NULL gives "").
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid during the call.
unsafe fn owned(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

/// Copies `count` names of a C array of the library's operator table.
///
/// # Safety
/// `names` points at `count` strings as for [`owned`] (or is NULL with `count` 0).
unsafe fn owned_names(names: *const *const c_char, count: i32) -> Vec<String> {
    (0..count.max(0) as usize).map(|k| owned(*names.add(k))).collect()
}

/// The inputs, outputs and attributes of the public operator `op` (a name [`op_list`] gives):
/// `Status::NotFound` naming it for any other name.
///
/// [`op_list`]: crate::op_list
pub fn op_describe(op: &str) -> Result<OpInfo> {
    let name = c_string(op, "operator name")?;
    // SAFETY: all-zero is a valid cohort_op_info; size is set before the call.
    let mut raw: sys::cohort_op_info = unsafe { std::mem::zeroed() };
    raw.size = std::mem::size_of::<sys::cohort_op_info>();
    // SAFETY: a NUL-terminated name and an output of the size it declares.
    check(unsafe { sys::cohort_op_describe(name.as_ptr(), &mut raw) })?;
    let attrs = (0..raw.num_attrs).map(|k| describe_attr(&name, k)).collect::<Result<Vec<_>>>()?;
    // SAFETY: on success every pointer points into the library's operator table, which lives as
    // long as the library; the arrays hold max_inputs and max(num_outputs, 1) names.
    unsafe {
        Ok(OpInfo {
            name: owned(raw.name),
            inputs: owned_names(raw.input_names, raw.max_inputs),
            min_inputs: raw.min_inputs.max(0) as usize,
            outputs: owned_names(raw.output_names, raw.num_outputs.max(1)),
            outputs_from: (!raw.outputs_attr.is_null()).then(|| owned(raw.outputs_attr)),
            attrs,
        })
    }
}

fn describe_attr(op: &CStr, index: i32) -> Result<OpAttr> {
    // SAFETY: all-zero is a valid cohort_op_attr_info; size is set before the call.
    let mut raw: sys::cohort_op_attr_info = unsafe { std::mem::zeroed() };
    raw.size = std::mem::size_of::<sys::cohort_op_attr_info>();
    // SAFETY: a NUL-terminated name and an output of the size it declares.
    check(unsafe { sys::cohort_op_describe_attr(op.as_ptr(), index, &mut raw) })?;
    let kind = match raw.type_ {
        sys::cohort_attr_type::COHORT_ATTR_INT => AttrType::Int,
        sys::cohort_attr_type::COHORT_ATTR_FLOAT => AttrType::Float,
        sys::cohort_attr_type::COHORT_ATTR_STRING => AttrType::String,
        sys::cohort_attr_type::COHORT_ATTR_INTS => AttrType::Ints,
        sys::cohort_attr_type::COHORT_ATTR_FLOATS => AttrType::Floats,
        other => {
            return Err(Error::new(
                Status::Unsupported,
                format!("attribute type {} is unknown to this binding", other.0),
            ))
        }
    };
    let required = raw.required != 0;
    let count = raw.default_count.max(0) as usize;
    // SAFETY: as in op_describe; the default lists hold default_count values when not NULL.
    let default = (!required).then(|| unsafe {
        match kind {
            AttrType::Int => AttrValue::Int(raw.default_int),
            AttrType::Float => AttrValue::Float(raw.default_float),
            AttrType::String => AttrValue::String(owned(raw.default_string)),
            AttrType::Ints if count > 0 => {
                AttrValue::Ints(std::slice::from_raw_parts(raw.default_ints, count).to_vec())
            }
            AttrType::Floats if count > 0 => {
                AttrValue::Floats(std::slice::from_raw_parts(raw.default_floats, count).to_vec())
            }
            AttrType::Ints => AttrValue::Ints(Vec::new()),
            AttrType::Floats => AttrValue::Floats(Vec::new()),
        }
    });
    // SAFETY: as in op_describe.
    Ok(OpAttr { name: unsafe { owned(raw.name) }, kind, required, default })
}
