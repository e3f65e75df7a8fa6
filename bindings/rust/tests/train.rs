//! Training through the safe API: the loss falls, the graph builder with every attribute type,
//! evaluation, parameters in and out, statistics, checkpoints, the built-in models and the
//! Fashion-MNIST dataset with its samplers.

mod common;

use cohort::{
    Attrs, CnnOptions, DType, Dataset, GptOptions, Graph, Initializer, Optimizer, OptimizerOptions,
    Sampler, SamplerOptions, Split, Tensor, TensorMut, Trainer, TrainerOptions,
};
use common::{batch, trainer, Lcg, CLASSES, FEATURES};

const B: i64 = 32;

fn inputs<'a>(x: &'a [f32], y: &'a [i32]) -> [Tensor<'a>; 2] {
    [
        Tensor::new("x", x, &[x.len() as i64 / FEATURES as i64, FEATURES as i64]),
        Tensor::new("y", y, &[y.len() as i64]),
    ]
}

#[test]
fn training_lowers_the_loss() {
    let mut t = trainer(B, 32, 7);
    let mut rng = Lcg(11);
    let mut losses = Vec::new();
    for _ in 0..80 {
        let (x, y) = batch(&mut rng, B as usize);
        losses.push(t.step(&inputs(&x, &y)).unwrap());
    }
    let first = losses[..5].iter().sum::<f32>() / 5.0;
    let last = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    assert!(first > 1.0, "initial loss {} should be near ln(4)", first);
    assert!(last < 0.6 * first, "loss went from {} to {}", first, last);
    let stats = t.stats().unwrap();
    assert_eq!(stats.step, 80);
    assert!(stats.learning_rate > 0.0 && stats.grad_norm > 0.0 && stats.parameter_bytes > 0);
}

#[test]
fn evaluation_and_parameters() {
    let mut t = trainer(B, 8, 3);
    let (x, y) = batch(&mut Lcg(5), 10); // evaluation may use another batch size
    let mut logits = vec![0f32; 10 * CLASSES];
    let mut loss = [0f32];
    {
        let mut outputs = [
            TensorMut::new("logits", &mut logits, &[10, CLASSES as i64]),
            TensorMut::new("loss", &mut loss, &[]),
        ];
        t.evaluate(&inputs(&x, &y), &mut outputs).unwrap();
    }
    assert!(logits.iter().any(|&v| v != 0.0) && loss[0] > 0.0);

    // Set a parameter, read it back, and see that the step counter did not move.
    let bias: Vec<f32> = (0..8).map(|i| i as f32 * 0.25).collect();
    t.set_parameter(&Tensor::new("fc1.bias", &bias, &[8])).unwrap();
    let mut back = vec![0f32; 8];
    t.get_parameter(&mut TensorMut::new("fc1.bias", &mut back, &[8])).unwrap();
    assert_eq!(back, bias);
    assert_eq!(t.stats().unwrap().step, 0);
}

/// matmul with an int attribute, scale with a float, reshape with a list of ints and
/// cross_entropy with a string: the builder passes each attribute type through.
#[test]
fn graph_builder_with_attributes() {
    let mut g = Graph::new().unwrap();
    let x = g.add_input("x", DType::F32, &[B, FEATURES as i64]).unwrap();
    let y = g.add_input("y", DType::I32, &[B]).unwrap();
    let w = g
        .add_parameter(
            "w",
            DType::F32,
            &[CLASSES as i64, FEATURES as i64],
            &Initializer::xavier_uniform(1.0),
        )
        .unwrap();
    let mut attrs = Attrs::new().unwrap();
    attrs.set_int("transpose_b", 1).unwrap();
    let z = g.add_op("matmul", "proj", &[x, w], Some(&attrs)).unwrap();
    let mut scale = Attrs::new().unwrap();
    scale.set_float("factor", 2.0).unwrap();
    let s = g.add_op("scale", "", &[z], Some(&scale)).unwrap(); // "" picks a name
    let mut shape = Attrs::new().unwrap();
    shape.set_ints("shape", &[B, CLASSES as i64]).unwrap();
    let logits = g.add_op("reshape", "logits", &[s], Some(&shape)).unwrap();
    let mut reduction = Attrs::new().unwrap();
    reduction.set_string("reduction", "mean").unwrap();
    let outs = g.add_op_outputs("cross_entropy", "loss", &[logits, y], Some(&reduction)).unwrap();
    assert!(!outs.is_empty());
    g.mark_output(logits).unwrap();
    g.set_loss(outs[0]).unwrap();

    assert_eq!(g.find("proj").unwrap(), z);
    assert_eq!(g.value_shape(z).unwrap(), (vec![B, CLASSES as i64], DType::F32));
    let stats = g.stats().unwrap();
    assert_eq!(stats.parameters, 1);
    assert_eq!(stats.parameter_elements, (CLASSES * FEATURES) as i64);

    // The saved graph loads back with the same counts, and trains.
    let path = common::temp_path("graph.cohort");
    g.save(&path).unwrap();
    let loaded = Graph::load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(loaded.stats().unwrap(), stats);
    let opt = Optimizer::new(&OptimizerOptions { lr: 0.5, ..OptimizerOptions::default() }).unwrap();
    let mut t = Trainer::new(&loaded, &opt, &TrainerOptions::default()).unwrap();
    let mut rng = Lcg(2);
    let (x0, y0) = batch(&mut rng, B as usize);
    let first = t.step(&inputs(&x0, &y0)).unwrap();
    let mut last = first;
    for _ in 0..40 {
        let (x, y) = batch(&mut rng, B as usize);
        last = t.step(&inputs(&x, &y)).unwrap();
    }
    assert!(last < first, "loss went from {} to {}", first, last);
}

#[test]
fn checkpoints_restore_parameters_and_values() {
    let mut t = trainer(B, 8, 9);
    let mut rng = Lcg(4);
    let (x, y) = batch(&mut rng, B as usize);
    t.step(&inputs(&x, &y)).unwrap();
    t.set_checkpoint_value("sampler.epoch", 42).unwrap();
    let path = common::temp_path("ckpt");
    t.save_checkpoint(&path).unwrap();

    let mut saved = vec![0f32; 8];
    t.get_parameter(&mut TensorMut::new("fc1.bias", &mut saved, &[8])).unwrap();
    t.step(&inputs(&x, &y)).unwrap();
    t.set_checkpoint_value("sampler.epoch", 43).unwrap();

    t.load_checkpoint(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut restored = vec![0f32; 8];
    t.get_parameter(&mut TensorMut::new("fc1.bias", &mut restored, &[8])).unwrap();
    assert_eq!(restored, saved);
    assert_eq!(t.checkpoint_value("sampler.epoch").unwrap(), 42);
    assert_eq!(t.stats().unwrap().step, 1);
}

#[test]
fn built_in_models_train_a_step() {
    let cnn =
        Graph::cnn(&CnnOptions { batch: 2, widths: vec![8], groups: 4, ..CnnOptions::default() })
            .unwrap();
    let mut t = Trainer::new(&cnn, &common::adamw(1e-3), &TrainerOptions::default()).unwrap();
    let images = vec![0.5f32; 2 * 28 * 28];
    let labels = [1i32, 7];
    let loss = t
        .step(&[Tensor::new("x", &images, &[2, 1, 28, 28]), Tensor::new("y", &labels, &[2])])
        .unwrap();
    assert!(loss.is_finite() && loss > 0.0);

    let gpt = Graph::gpt(&GptOptions {
        batch: 2,
        context: 8,
        vocab: 32,
        layers: 1,
        width: 16,
        heads: 2,
        ..GptOptions::default()
    })
    .unwrap();
    assert!(gpt.find("wte.weight").is_ok());
    let mut t = Trainer::new(&gpt, &common::adamw(1e-3), &TrainerOptions::default()).unwrap();
    let tokens: Vec<i32> = (0..16).map(|i| i % 32).collect();
    let targets: Vec<i32> = (1..17).map(|i| i % 32).collect();
    let loss = t
        .step(&[Tensor::new("tokens", &tokens, &[2, 8]), Tensor::new("targets", &targets, &[2, 8])])
        .unwrap();
    assert!((loss - (32f32).ln()).abs() < 1.0, "loss {} should be near ln(32)", loss);
}

#[test]
fn fashion_mnist_batches_and_sampler_positions() {
    let test = Dataset::fashion_mnist(None, Split::Validation).unwrap();
    assert_eq!(test.size().unwrap(), 10_000);
    let mut sampler = Sampler::new(
        &test,
        &SamplerOptions { seed: 0, shuffle: false, ..SamplerOptions::default() },
    )
    .unwrap();
    let (mut images, mut labels) = (vec![0f32; 4 * 784], vec![-1i32; 4]);
    let mut batch =
        [TensorMut::new("x", &mut images, &[4, 784]), TensorMut::new("y", &mut labels, &[4])];
    test.next_batch(&mut sampler, &mut batch).unwrap();
    assert_eq!(sampler.position().unwrap(), (0, 4));
    let first: Vec<i32> = batch[1].data::<i32>().unwrap().to_vec();
    assert!(first.iter().all(|&l| (0..10).contains(&l)));
    assert!(batch[0].data::<f32>().unwrap().iter().all(|&p| (0.0..=1.0).contains(&p)));

    // Rewinding replays the same examples.
    sampler.set_position(0, 0).unwrap();
    test.next_batch(&mut sampler, &mut batch).unwrap();
    assert_eq!(batch[1].data::<i32>().unwrap(), first.as_slice());
}

#[test]
fn version_and_operator_list() {
    assert_eq!(cohort::abi_version() / 10000, cohort::ABI_VERSION / 10000);
    assert!(cohort::version().starts_with("0."));
    let ops = cohort::op_list().unwrap();
    for op in ["linear", "relu", "matmul", "cross_entropy"] {
        assert!(ops.iter().any(|o| o == op), "{} missing from {:?}", op, ops);
    }
    assert_eq!(DType::F32.size(), 4);
    assert_eq!(DType::Bf16.size(), 2);
}

#[test]
fn operators_describe_what_add_op_accepts() {
    use cohort::{op_describe, AttrType, AttrValue, OpAttr};
    let linear = op_describe("linear").unwrap();
    assert_eq!(linear.inputs, ["x", "weight", "bias"]);
    assert_eq!((linear.min_inputs, linear.outputs.as_slice()), (2, &["y".to_owned()][..]));
    assert_eq!(linear.outputs_from, None);
    let split = op_describe("split").unwrap();
    assert_eq!(
        (split.outputs, split.outputs_from.as_deref()),
        (vec!["part".to_owned()], Some("sizes"))
    );
    let reduction = OpAttr {
        name: "reduction".into(),
        kind: AttrType::String,
        required: false,
        default: Some(AttrValue::String("mean".into())),
    };
    assert!(op_describe("cross_entropy").unwrap().attrs.contains(&reduction));
    let stride =
        op_describe("conv2d").unwrap().attrs.into_iter().find(|a| a.name == "stride").unwrap();
    assert_eq!(stride.default, Some(AttrValue::Ints(vec![1, 1])));
    for op in cohort::op_list().unwrap() {
        assert_eq!(op_describe(&op).unwrap().name, op);
    }
    // The required attribute the description names is what builds the node.
    let perm = &op_describe("transpose").unwrap().attrs[0];
    assert!(perm.required && perm.kind == AttrType::Ints);
    let mut g = Graph::new().unwrap();
    let x = g.add_input("x", DType::F32, &[2, 3]).unwrap();
    let mut attrs = Attrs::new().unwrap();
    attrs.set_ints(&perm.name, &[1, 0]).unwrap();
    g.add_op("transpose", "xt", &[x], Some(&attrs)).unwrap();
    let e = op_describe("nope").unwrap_err();
    assert_eq!(e.status(), cohort::Status::NotFound);
    assert!(
        e.message().contains("cohort_op_describe: no public operator is named 'nope'"),
        "{}",
        e.message()
    );
}
