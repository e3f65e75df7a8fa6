//! The graph builder: inputs, parameters with initializers, operators with attributes, outputs
//! and the loss. Values are identified by [`Value`] ids and by their unique names; shapes and
//! dtypes are checked by the library as each node is added.

use std::path::Path;

use crate::error::{c_count, c_path, c_string, check, Error, Result, Status};
use crate::sys;
use crate::tensor::DType;

handle!(
    /// A reusable set of named, typed operator attributes (adding an operator copies it).
    Attrs,
    sys::cohort_attrs,
    sys::cohort_attrs_destroy
);

impl Attrs {
    pub fn new() -> Result<Attrs> {
        create!(Attrs, |out| sys::cohort_attrs_create(&mut out))
    }

    /// Sets (or replaces) an integer attribute; returns self for chaining.
    pub fn set_int(&mut self, name: &str, value: i64) -> Result<&mut Attrs> {
        let name = c_string(name, "attribute name")?;
        // SAFETY: live handle, NUL-terminated name (copied by the library).
        check(unsafe { sys::cohort_attrs_set_int(self.as_raw(), name.as_ptr(), value) })?;
        Ok(self)
    }

    pub fn set_float(&mut self, name: &str, value: f64) -> Result<&mut Attrs> {
        let name = c_string(name, "attribute name")?;
        // SAFETY: as set_int.
        check(unsafe { sys::cohort_attrs_set_float(self.as_raw(), name.as_ptr(), value) })?;
        Ok(self)
    }

    pub fn set_string(&mut self, name: &str, value: &str) -> Result<&mut Attrs> {
        let name = c_string(name, "attribute name")?;
        let value = c_string(value, "attribute value")?;
        // SAFETY: as set_int; both strings are copied.
        check(unsafe {
            sys::cohort_attrs_set_string(self.as_raw(), name.as_ptr(), value.as_ptr())
        })?;
        Ok(self)
    }

    pub fn set_ints(&mut self, name: &str, values: &[i64]) -> Result<&mut Attrs> {
        let name = c_string(name, "attribute name")?;
        let count = c_count(values.len(), "attribute list length")?;
        // SAFETY: as set_int; the list is read (copied) during the call.
        check(unsafe {
            sys::cohort_attrs_set_ints(self.as_raw(), name.as_ptr(), values.as_ptr(), count)
        })?;
        Ok(self)
    }

    pub fn set_floats(&mut self, name: &str, values: &[f64]) -> Result<&mut Attrs> {
        let name = c_string(name, "attribute name")?;
        let count = c_count(values.len(), "attribute list length")?;
        // SAFETY: as set_ints.
        check(unsafe {
            sys::cohort_attrs_set_floats(self.as_raw(), name.as_ptr(), values.as_ptr(), count)
        })?;
        Ok(self)
    }
}

/// A value of a graph (an input, a parameter or an operator's output), by id.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub i32);

/// How a parameter's first values are drawn.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum InitKind {
    Zeros,
    Ones,
    /// All equal to `a`.
    Constant,
    /// Uniform in [a, b).
    Uniform,
    /// Mean a, standard deviation b.
    Normal,
    /// Gain a (0 means 1).
    XavierUniform,
    /// Gain a (0 means sqrt(2)), fan_in = elements / `shape[0]`.
    KaimingUniform,
    KaimingNormal,
}

/// A parameter initializer: a kind, its two numbers and a seed (0: derived from the trainer's
/// seed and the parameter's name).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Initializer {
    pub kind: InitKind,
    pub a: f64,
    pub b: f64,
    pub seed: u64,
}

impl Initializer {
    fn with(kind: InitKind, a: f64, b: f64) -> Initializer {
        Initializer { kind, a, b, seed: 0 }
    }
    pub fn zeros() -> Initializer {
        Initializer::with(InitKind::Zeros, 0.0, 0.0)
    }
    pub fn ones() -> Initializer {
        Initializer::with(InitKind::Ones, 0.0, 0.0)
    }
    pub fn constant(value: f64) -> Initializer {
        Initializer::with(InitKind::Constant, value, 0.0)
    }
    pub fn uniform(low: f64, high: f64) -> Initializer {
        Initializer::with(InitKind::Uniform, low, high)
    }
    pub fn normal(mean: f64, std: f64) -> Initializer {
        Initializer::with(InitKind::Normal, mean, std)
    }
    pub fn xavier_uniform(gain: f64) -> Initializer {
        Initializer::with(InitKind::XavierUniform, gain, 0.0)
    }
    pub fn kaiming_uniform(gain: f64) -> Initializer {
        Initializer::with(InitKind::KaimingUniform, gain, 0.0)
    }
    pub fn kaiming_normal(gain: f64) -> Initializer {
        Initializer::with(InitKind::KaimingNormal, gain, 0.0)
    }

    fn to_raw(self) -> sys::cohort_initializer {
        use sys::cohort_init_kind as K;
        // SAFETY: never fails; gives the struct with its size set.
        let mut raw = unsafe { sys::cohort_initializer_default() };
        raw.kind = match self.kind {
            InitKind::Zeros => K::COHORT_INIT_ZEROS,
            InitKind::Ones => K::COHORT_INIT_ONES,
            InitKind::Constant => K::COHORT_INIT_CONSTANT,
            InitKind::Uniform => K::COHORT_INIT_UNIFORM,
            InitKind::Normal => K::COHORT_INIT_NORMAL,
            InitKind::XavierUniform => K::COHORT_INIT_XAVIER_UNIFORM,
            InitKind::KaimingUniform => K::COHORT_INIT_KAIMING_UNIFORM,
            InitKind::KaimingNormal => K::COHORT_INIT_KAIMING_NORMAL,
        };
        raw.a = self.a;
        raw.b = self.b;
        raw.seed = self.seed;
        raw
    }
}

impl Default for Initializer {
    /// Zeros, as cohort_initializer_default.
    fn default() -> Initializer {
        Initializer::zeros()
    }
}

/// Counts of a graph.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub values: i32,
    pub nodes: i32,
    pub parameters: i32,
    pub parameter_elements: i64,
}

handle!(
    /// A model under construction: inputs, parameters, operators, outputs and a loss. Trainers
    /// copy it, so it may be dropped once they are made.
    Graph,
    sys::cohort_graph,
    sys::cohort_graph_destroy
);

/// The most outputs one operator is asked for.
const MAX_OUTPUTS: usize = 64;

impl Graph {
    /// An empty graph.
    pub fn new() -> Result<Graph> {
        create!(Graph, |out| sys::cohort_graph_create(&mut out))
    }

    /// Reads a graph file written by [`Graph::save`]; CORRUPT (or NOT_FOUND for an unknown
    /// operator) for a bad file.
    pub fn load(path: impl AsRef<Path>) -> Result<Graph> {
        let path = c_path(path.as_ref())?;
        create!(Graph, |out| sys::cohort_graph_load(path.as_ptr(), &mut out))
    }

    /// Writes the structure (not trained values) to `path`, atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        check(unsafe { sys::cohort_graph_save(self.as_raw(), path.as_ptr()) })
    }

    /// A value fed at every step (rank 0..8; dimension 0 is the batch).
    pub fn add_input(&mut self, name: &str, dtype: DType, shape: &[i64]) -> Result<Value> {
        let name = c_string(name, "input name")?;
        let rank = c_count(shape.len(), "rank")?;
        let mut id = 0;
        // SAFETY: live handle; name and shape are read during the call.
        check(unsafe {
            sys::cohort_graph_add_input(
                self.as_raw(),
                name.as_ptr(),
                dtype.to_raw(),
                shape.as_ptr(),
                rank,
                &mut id,
            )
        })?;
        Ok(Value(id))
    }

    /// A trainable tensor (f32 or bf16) with the initializer of its first values.
    pub fn add_parameter(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[i64],
        init: &Initializer,
    ) -> Result<Value> {
        let name = c_string(name, "parameter name")?;
        let rank = c_count(shape.len(), "rank")?;
        let init = init.to_raw();
        let mut id = 0;
        // SAFETY: as add_input; the initializer is read during the call.
        check(unsafe {
            sys::cohort_graph_add_parameter(
                self.as_raw(),
                name.as_ptr(),
                dtype.to_raw(),
                shape.as_ptr(),
                rank,
                &init,
                &mut id,
            )
        })?;
        Ok(Value(id))
    }

    /// Adds operator `op` named `name` ("" picks "<op>_<n>") over `inputs`, and returns its
    /// result (output 0). NOT_FOUND for an unknown operator, SHAPE_MISMATCH for inputs that do
    /// not fit it, INVALID_ARGUMENT for a wrong input count or attribute; the graph is unchanged
    /// after any error.
    pub fn add_op(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[Value],
        attrs: Option<&Attrs>,
    ) -> Result<Value> {
        let outputs = self.add_op_outputs(op, name, inputs, attrs)?;
        outputs
            .first()
            .copied()
            .ok_or_else(|| Error::new(Status::Internal, "add_op: the operator has no output"))
    }

    /// Like add_op, returning every output (output k > 0 is named "<name>:<k>"; some hold what
    /// the backward pass needs).
    pub fn add_op_outputs(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[Value],
        attrs: Option<&Attrs>,
    ) -> Result<Vec<Value>> {
        let op = c_string(op, "operator")?;
        let name = c_string(name, "node name")?;
        let ids: Vec<i32> = inputs.iter().map(|v| v.0).collect();
        let num_inputs = c_count(ids.len(), "number of inputs")?;
        let attrs = attrs.map_or(std::ptr::null(), |a| a.as_raw() as *const sys::cohort_attrs);
        let mut outputs = [0i32; MAX_OUTPUTS];
        let mut count = 0;
        // SAFETY: live handles; strings, inputs and attrs are read during the call; outputs has
        // room for MAX_OUTPUTS ids.
        check(unsafe {
            sys::cohort_graph_add_op(
                self.as_raw(),
                op.as_ptr(),
                name.as_ptr(),
                ids.as_ptr(),
                num_inputs,
                attrs,
                outputs.as_mut_ptr(),
                MAX_OUTPUTS as i32,
                &mut count,
            )
        })?;
        let count = (count.max(0) as usize).min(MAX_OUTPUTS);
        Ok(outputs[..count].iter().map(|&id| Value(id)).collect())
    }

    /// Marks a value as a model output (what [`crate::Trainer::evaluate`] can return).
    pub fn mark_output(&mut self, value: Value) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::cohort_graph_mark_output(self.as_raw(), value.0) })
    }

    /// Sets the training loss: a float scalar value.
    pub fn set_loss(&mut self, value: Value) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::cohort_graph_set_loss(self.as_raw(), value.0) })
    }

    /// The value called `name`; NOT_FOUND if none.
    pub fn find(&self, name: &str) -> Result<Value> {
        let name = c_string(name, "value name")?;
        let mut id = 0;
        // SAFETY: live handle, NUL-terminated name.
        check(unsafe { sys::cohort_graph_find(self.as_raw(), name.as_ptr(), &mut id) })?;
        Ok(Value(id))
    }

    /// Shape and dtype of a value.
    pub fn value_shape(&self, value: Value) -> Result<(Vec<i64>, DType)> {
        let mut shape = vec![0i64; 8];
        loop {
            let mut rank = 0;
            let mut dtype = sys::cohort_dtype::COHORT_F32;
            let max_rank = c_count(shape.len(), "rank")?;
            // SAFETY: live handle; shape has room for max_rank extents.
            check(unsafe {
                sys::cohort_graph_value_shape(
                    self.as_raw(),
                    value.0,
                    shape.as_mut_ptr(),
                    max_rank,
                    &mut rank,
                    &mut dtype,
                )
            })?;
            let rank = rank.max(0) as usize;
            if rank <= shape.len() {
                shape.truncate(rank);
                return Ok((shape, DType::from_raw(dtype)?));
            }
            shape.resize(rank, 0); // more extents than room: ask again
        }
    }

    /// Counts of values, nodes, parameters and parameter elements.
    pub fn stats(&self) -> Result<GraphStats> {
        let mut s = GraphStats::default();
        // SAFETY: live handle; every output points at a field of s.
        check(unsafe {
            sys::cohort_graph_stats(
                self.as_raw(),
                &mut s.values,
                &mut s.nodes,
                &mut s.parameters,
                &mut s.parameter_elements,
            )
        })?;
        Ok(s)
    }
}

/// Names of the public operators.
pub fn op_list() -> Result<Vec<String>> {
    let mut needed = 0usize;
    // A NULL buffer only asks for the size (the call reports that as INVALID_ARGUMENT).
    // SAFETY: NULL with size 0 is allowed; needed is a valid output.
    let _ = unsafe { sys::cohort_op_list(std::ptr::null_mut(), 0, &mut needed) };
    if needed == 0 {
        return Err(Error::new(Status::Internal, "cohort_op_list reported no size"));
    }
    let mut buf = vec![0u8; needed];
    // SAFETY: buf holds `needed` bytes.
    check(unsafe { sys::cohort_op_list(buf.as_mut_ptr().cast(), buf.len(), &mut needed) })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..end]);
    Ok(text.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect())
}
