//! Built-in model builders: each makes a ready [`Graph`] with inputs, initialised parameters, the
//! output "logits" and the loss "loss" (mean cross entropy against an i32 label input). Defaults
//! come from the library's *_default() functions, so they cannot drift from the C API.

use crate::error::{c_count, Result};
use crate::graph::Graph;
use crate::sys;

/// The nonlinearity of an MLP.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    Relu,
    Gelu,
    Tanh,
}

impl Activation {
    fn to_raw(self) -> sys::cohort_activation {
        match self {
            Activation::Relu => sys::cohort_activation::COHORT_ACTIVATION_RELU,
            Activation::Gelu => sys::cohort_activation::COHORT_ACTIVATION_GELU,
            Activation::Tanh => sys::cohort_activation::COHORT_ACTIVATION_TANH,
        }
    }

    fn from_raw(raw: sys::cohort_activation) -> Activation {
        match raw {
            sys::cohort_activation::COHORT_ACTIVATION_GELU => Activation::Gelu,
            sys::cohort_activation::COHORT_ACTIVATION_TANH => Activation::Tanh,
            _ => Activation::Relu,
        }
    }
}

/// A multi-layer perceptron. Inputs "x" f32 `[batch, in_features]` and "y" i32 `[batch]`;
/// logits `[batch, classes]`; parameters "fc1.weight" `[hidden[0], in_features]`, "fc1.bias", ...
#[derive(Clone, Debug, PartialEq)]
pub struct MlpOptions {
    pub batch: i64,
    pub in_features: i64,
    /// Widths of the hidden layers (0..64 of them).
    pub hidden: Vec<i64>,
    pub classes: i64,
    pub activation: Activation,
}

impl Default for MlpOptions {
    /// Batch 32, 784 inputs, one hidden layer of 128, 10 classes, relu.
    fn default() -> MlpOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_model_mlp_options_default() };
        MlpOptions {
            batch: raw.batch,
            in_features: raw.in_features,
            // SAFETY: the default's `hidden` points at num_hidden static widths.
            hidden: unsafe { static_list(raw.hidden, raw.num_hidden) },
            classes: raw.classes,
            activation: Activation::from_raw(raw.activation),
        }
    }
}

/// A small ResNet (see cohort.h). Inputs "x" f32 `[batch, channels, height, width]` and "y" i32
/// `[batch]`; logits `[batch, classes]`.
#[derive(Clone, Debug, PartialEq)]
pub struct CnnOptions {
    pub batch: i64,
    pub channels: i64,
    pub height: i64,
    pub width: i64,
    pub classes: i64,
    /// Channels of each stage (1..8 stages).
    pub widths: Vec<i64>,
    pub blocks_per_stage: i64,
    /// Groupnorm groups; must divide every width.
    pub groups: i64,
    pub eps: f64,
}

impl Default for CnnOptions {
    /// Fashion-MNIST: batch 32, [1, 28, 28], 10 classes, widths [16, 32, 64], one block per
    /// stage, 8 groups, eps 1e-5.
    fn default() -> CnnOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_model_cnn_options_default() };
        CnnOptions {
            batch: raw.batch,
            channels: raw.channels,
            height: raw.height,
            width: raw.width,
            classes: raw.classes,
            // SAFETY: the default's `widths` points at num_stages static widths.
            widths: unsafe { static_list(raw.widths, raw.num_stages) },
            blocks_per_stage: raw.blocks_per_stage,
            groups: raw.groups,
            eps: raw.eps,
        }
    }
}

/// A GPT-2 style decoder. Inputs "tokens" and "targets", i32 [batch, context]; logits [batch,
/// context, vocab]; parameters named as Hugging Face's GPT2LMHeadModel without "transformer.".
#[derive(Clone, Debug, PartialEq)]
pub struct GptOptions {
    pub batch: i64,
    pub context: i64,
    pub vocab: i64,
    pub layers: i64,
    pub width: i64,
    /// Must divide width.
    pub heads: i64,
    /// logits = ln_f(x) wte^T.
    pub tie_weights: bool,
    /// In [0, 1); 0 adds no dropout node.
    pub dropout: f64,
    pub eps: f64,
}

impl Default for GptOptions {
    /// Batch 8, context 128, vocab 256 (bytes), 4 layers, width 256, 4 heads, tied, no dropout,
    /// eps 1e-5.
    fn default() -> GptOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_model_gpt_options_default() };
        GptOptions {
            batch: raw.batch,
            context: raw.context,
            vocab: raw.vocab,
            layers: raw.layers,
            width: raw.width,
            heads: raw.heads,
            tie_weights: raw.tie_weights != 0,
            dropout: raw.dropout,
            eps: raw.eps,
        }
    }
}

/// Copies a list the library keeps in static memory.
///
/// # Safety
/// `values` must point at `count` readable elements (or count <= 0).
unsafe fn static_list(values: *const i64, count: i32) -> Vec<i64> {
    if values.is_null() || count <= 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(values, count as usize).to_vec()
}

impl Graph {
    /// An MLP; INVALID_ARGUMENT naming the field for a bad option.
    pub fn mlp(options: &MlpOptions) -> Result<Graph> {
        // SAFETY: never fails.
        let mut raw = unsafe { sys::cohort_model_mlp_options_default() };
        raw.batch = options.batch;
        raw.in_features = options.in_features;
        raw.hidden = options.hidden.as_ptr();
        raw.num_hidden = c_count(options.hidden.len(), "mlp: number of hidden layers")?;
        raw.classes = options.classes;
        raw.activation = options.activation.to_raw();
        // `raw.hidden` borrows options.hidden, which outlives the call.
        create!(Graph, |out| sys::cohort_graph_create_mlp(&raw, &mut out))
    }

    /// A small ResNet; INVALID_ARGUMENT naming the field for a bad option.
    pub fn cnn(options: &CnnOptions) -> Result<Graph> {
        // SAFETY: never fails.
        let mut raw = unsafe { sys::cohort_model_cnn_options_default() };
        raw.batch = options.batch;
        raw.channels = options.channels;
        raw.height = options.height;
        raw.width = options.width;
        raw.classes = options.classes;
        raw.widths = options.widths.as_ptr();
        raw.num_stages = c_count(options.widths.len(), "cnn: number of stages")?;
        raw.blocks_per_stage = options.blocks_per_stage;
        raw.groups = options.groups;
        raw.eps = options.eps;
        create!(Graph, |out| sys::cohort_graph_create_cnn(&raw, &mut out))
    }

    /// A GPT-2 style decoder; INVALID_ARGUMENT naming the field for a bad option ("gpt: heads
    /// (3) must divide width (256)").
    pub fn gpt(options: &GptOptions) -> Result<Graph> {
        // SAFETY: never fails.
        let mut raw = unsafe { sys::cohort_model_gpt_options_default() };
        raw.batch = options.batch;
        raw.context = options.context;
        raw.vocab = options.vocab;
        raw.layers = options.layers;
        raw.width = options.width;
        raw.heads = options.heads;
        raw.tie_weights = options.tie_weights as i32;
        raw.dropout = options.dropout;
        raw.eps = options.eps;
        create!(Graph, |out| sys::cohort_graph_create_gpt(&raw, &mut out))
    }
}
