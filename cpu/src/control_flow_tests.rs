//! IF and WHILE: execution (branches, loops, dynamic shapes, nesting, the loop timeout) and
//! every control-flow validation rule. Expected values are worked out by hand in the
//! comments.

use std::time::{Duration, Instant};

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

const F: T = T::TensorFloat32;

/// A graph `(a, b) -> op(a, b)` on FLOAT32 tensors of dimensions `dims`.
fn binary(op: OperationType, dims: &[u32]) -> Graph {
    let mut b = B::new();
    let x = b.input(F, dims);
    let y = b.input(F, dims);
    let act = b.int(0);
    let o = b.output(F, dims);
    b.op(op, &[x, y, act], &[o]);
    b.g
}

/// Root graph `IF(cond, then = referenced 0, else = referenced 1, x...)` with `inputs`
/// values and one output, all of type `ty` and dimensions `[2]`. Operand 0 is the
/// condition, 1..=inputs the values.
fn if_root(ty: OperandType, inputs: usize, then: Graph, els: Graph) -> Graph {
    let mut b = B::new();
    let mut args = vec![b.input(T::TensorBool8, &[1])];
    let xs: Vec<u32> = (0..inputs).map(|_| b.input(ty, &[2])).collect();
    args.extend([b.subgraph(0), b.subgraph(1)]);
    args.extend(xs);
    let o = b.output(ty, &[2]);
    b.op(O::If, &args, &[o]);
    b.g.referenced = vec![then, els];
    b.g
}

/// Root graph `IF(cond, then = referenced 0, else = referenced 1, x, y)` on FLOAT32 `[2]`.
fn if_model(then: Graph, els: Graph) -> Graph {
    if_root(F, 2, then, els)
}

fn floats(outs: &Outs, k: usize) -> Vec<f32> {
    bf(&outs[k].0)
}

#[test]
fn if_runs_the_then_branch_on_true_and_the_else_branch_on_false_float32() {
    let g = if_model(binary(O::Add, &[2]), binary(O::Mul, &[2]));
    let x = fb(&[1.0, 2.0]);
    let y = fb(&[3.0, 4.0]);
    // then: [1+3, 2+4]; else: [1*3, 2*4].
    let t = run_outputs(g.clone(), &[vec![1], x.clone(), y.clone()]).unwrap();
    assert_eq!(floats(&t, 0), [4.0, 6.0]);
    let e = run_outputs(g, &[vec![0], x, y]).unwrap();
    assert_eq!(floats(&e, 0), [3.0, 8.0]);
}

/// IF over RELU (then) and RELU1 (else) on TENSOR_QUANT8_ASYMM `[2]`, zero point 128,
/// scale 0.5 but for the IF's input, of scale `x_scale`.
fn if_q8(x_scale: f32) -> Graph {
    let mut g = if_root(
        T::TensorQuant8Asymm,
        1,
        q8_unary(O::Relu),
        q8_unary(O::Relu1),
    );
    set_q(&mut g, 1, x_scale, 128);
    let o = g.output_indexes[0];
    set_q(&mut g, o, 0.5, 128);
    g
}

/// A graph `x -> op(x)` on TENSOR_QUANT8_ASYMM `[2]`, scale 0.5, zero point 128.
fn q8_unary(op: OperationType) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[2]);
    b.q(x, 0.5, 128);
    let o = b.output(T::TensorQuant8Asymm, &[2]);
    b.q(o, 0.5, 128);
    b.op(op, &[x], &[o]);
    b.g
}

#[test]
fn if_chooses_its_branch_on_quant8_data() {
    let g = if_q8(0.5);
    // x = [124, 134] is [-2.0, 3.0]. RELU: [0.0, 3.0] = [128, 134];
    // RELU1: [-1.0, 1.0] = [126, 130].
    let t = run_outputs(g.clone(), &[vec![1], vec![124, 134]]).unwrap();
    assert_eq!(t[0].0, [128, 134]);
    let e = run_outputs(g, &[vec![0], vec![124, 134]]).unwrap();
    assert_eq!(e[0].0, [126, 130]);
}

#[test]
fn if_branches_read_their_own_constants_and_the_execution_pools() {
    // then: x + [10, 20] (CONSTANT_COPY of the branch); else: x + pool 0 bytes 8..16.
    let mut then = B::new();
    let x = then.input(F, &[2]);
    let k = then.f32c(&[2], &[10.0, 20.0]);
    let act = then.int(0);
    let o = then.output(F, &[2]);
    then.op(O::Add, &[x, k, act], &[o]);
    let mut els = B::new();
    let x = els.input(F, &[2]);
    let k = els.add(
        F,
        &[2],
        Lifetime::ConstantReference {
            pool: 0,
            offset: 8,
            length: 8,
        },
    );
    let act = els.int(0);
    let o = els.output(F, &[2]);
    els.op(O::Add, &[x, k, act], &[o]);
    let p = PreparedGraph::new(if_root(F, 1, then.g, els.g)).unwrap();
    let pool = fb(&[0.0, 0.0, 100.0, 200.0]);
    let xb = fb(&[1.0, 2.0]);
    let run = |cond: u8| {
        let mut out = vec![0u8; 8];
        let args = [
            InputArg::Value {
                data: &[cond],
                dimensions: vec![],
            },
            InputArg::Value {
                data: &xb,
                dimensions: vec![],
            },
        ];
        p.execute(&[&pool], &args, &mut [&mut out[..]]).unwrap();
        bf(&out)
    };
    assert_eq!(run(1), [11.0, 22.0]);
    assert_eq!(run(0), [101.0, 202.0]);
}

/// WHILE condition `LESS(v[at], v[limit])` over `count` FLOAT32 `[1]` inputs.
fn less_cond(count: usize, at: usize, limit: usize) -> Graph {
    let mut b = B::new();
    let ins: Vec<u32> = (0..count).map(|_| b.input(F, &[1])).collect();
    let o = b.output(T::TensorBool8, &[1]);
    b.op(O::Less, &[ins[at], ins[limit]], &[o]);
    b.g
}

/// Root graph `WHILE(cond = referenced 0, body = referenced 1, x...)` on FLOAT32 inputs and
/// outputs of dimensions `ins` and `outs`; `more` are further referenced graphs (2, 3, ...).
fn while_model(
    cond: Graph,
    body: Graph,
    ins: &[&[u32]],
    outs: &[&[u32]],
    more: Vec<Graph>,
) -> Graph {
    let mut b = B::new();
    let mut args = vec![b.subgraph(0), b.subgraph(1)];
    args.extend(ins.iter().map(|d| b.input(F, d)));
    let results: Vec<u32> = outs.iter().map(|d| b.output(F, d)).collect();
    b.op(O::While, &args, &results);
    b.g.referenced = [cond, body].into_iter().chain(more).collect();
    b.g
}

/// The counting loop: `i = i0; sum = s0; while i < n { sum += i; i += 1 }` with outputs
/// `(i, sum)`; referenced 0 is the condition, 1 the body.
fn counting_loop() -> Graph {
    let mut body = B::new();
    let i = body.input(F, &[1]);
    let sum = body.input(F, &[1]);
    let _n = body.input(F, &[1]);
    let one = body.f32c(&[1], &[1.0]);
    let act = body.int(0);
    let i2 = body.output(F, &[1]);
    let sum2 = body.output(F, &[1]);
    body.op(O::Add, &[i, one, act], &[i2]);
    body.op(O::Add, &[sum, i, act], &[sum2]);
    while_model(
        less_cond(3, 0, 2),
        body.g,
        &[&[1], &[1], &[1]],
        &[&[1], &[1]],
        vec![],
    )
}

#[test]
fn while_counting_loop_sums_below_n() {
    // i = 0..5: sum = 0 + 1 + 2 + 3 + 4 = 10, and i ends at 5.
    let outs = run_outputs(counting_loop(), &[fb(&[0.0]), fb(&[0.0]), fb(&[5.0])]).unwrap();
    assert_eq!(floats(&outs, 0), [5.0]);
    assert_eq!(floats(&outs, 1), [10.0]);
}

#[test]
fn while_whose_condition_is_false_at_once_returns_its_inputs() {
    // i = 7 is not below n = 3: no iteration, the outputs are the initial values.
    let outs = run_outputs(counting_loop(), &[fb(&[7.0]), fb(&[42.0]), fb(&[3.0])]).unwrap();
    assert_eq!(floats(&outs, 0), [7.0]);
    assert_eq!(floats(&outs, 1), [42.0]);
}

#[test]
fn while_carries_state_only_operands_and_reads_input_only_ones() {
    // m = 1 (a), k = 1 (b, state only), n = 1 (limit, input only):
    // while a < limit { (a, b) = (b, a + b) }. From (0, 1) with limit 10:
    // (0,1) (1,1) (1,2) (2,3) (3,5) (5,8) (8,13) (13,21): a = 13.
    let mut body = B::new();
    let a = body.input(F, &[1]);
    let bb = body.input(F, &[1]);
    let _limit = body.input(F, &[1]);
    let zero = body.f32c(&[1], &[0.0]);
    let act = body.int(0);
    let a2 = body.output(F, &[1]);
    let b2 = body.output(F, &[1]);
    body.op(O::Add, &[bb, zero, act], &[a2]);
    body.op(O::Add, &[a, bb, act], &[b2]);
    let g = while_model(
        less_cond(3, 0, 2),
        body.g,
        &[&[1], &[1], &[1]],
        &[&[1]],
        vec![],
    );
    let outs = run_outputs(g, &[fb(&[0.0]), fb(&[1.0]), fb(&[10.0])]).unwrap();
    assert_eq!(outs.len(), 1);
    assert_eq!(floats(&outs, 0), [13.0]);
}

#[test]
fn while_output_takes_the_shape_the_body_grows_it_to() {
    // x = [0], i = 1; while i < n { x = concat(x, i); i += 1 } with n = 4:
    // x = [0, 1, 2, 3] of shape [4], though every declaration says [0] (unknown).
    let mut body = B::new();
    let x = body.input(F, &[0]);
    let i = body.input(F, &[1]);
    let _n = body.input(F, &[1]);
    let axis = body.int(0);
    let one = body.f32c(&[1], &[1.0]);
    let act = body.int(0);
    let x2 = body.output(F, &[0]);
    let i2 = body.output(F, &[1]);
    body.op(O::Concatenation, &[x, i, axis], &[x2]);
    body.op(O::Add, &[i, one, act], &[i2]);
    let mut cond = B::new();
    let _x = cond.input(F, &[0]);
    let i = cond.input(F, &[1]);
    let n = cond.input(F, &[1]);
    let o = cond.output(T::TensorBool8, &[1]);
    cond.op(O::Less, &[i, n], &[o]);
    let g = while_model(cond.g, body.g, &[&[1], &[1], &[1]], &[&[0], &[1]], vec![]);
    let outs = run_outputs(g, &[fb(&[0.0]), fb(&[1.0]), fb(&[4.0])]).unwrap();
    assert_eq!(outs[0].1, [4]);
    assert_eq!(floats(&outs, 0), [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(floats(&outs, 1), [4.0]);
}

#[test]
fn if_nested_in_a_while_body_picks_a_branch_each_iteration() {
    // i = 0..5, k = 2: sum += i while i < k, else sum -= i:
    // 0 + 0 + 1 - 2 - 3 - 4 = -8.
    // Referenced: 0 condition, 1 body, 2 then (sum + i), 3 else (sum - i).
    let mut body = B::new();
    let i = body.input(F, &[1]);
    let sum = body.input(F, &[1]);
    let n = body.input(F, &[1]);
    let k = body.input(F, &[1]);
    let one = body.f32c(&[1], &[1.0]);
    let act = body.int(0);
    let below = body.temp(T::TensorBool8, &[1]);
    body.op(O::Less, &[i, k], &[below]);
    let t = body.subgraph(2);
    let e = body.subgraph(3);
    let i2 = body.output(F, &[1]);
    let sum2 = body.output(F, &[1]);
    body.op(O::If, &[below, t, e, sum, i], &[sum2]);
    body.op(O::Add, &[i, one, act], &[i2]);
    let _ = n;
    let g = while_model(
        less_cond(4, 0, 2),
        body.g,
        &[&[1], &[1], &[1], &[1]],
        &[&[1], &[1]],
        vec![binary(O::Add, &[1]), binary(O::Sub, &[1])],
    );
    let inputs = [fb(&[0.0]), fb(&[0.0]), fb(&[5.0]), fb(&[2.0])];
    let outs = run_outputs(g, &inputs).unwrap();
    assert_eq!(floats(&outs, 0), [5.0]);
    assert_eq!(floats(&outs, 1), [-8.0]);
}

#[test]
fn while_that_never_ends_fails_with_the_loop_timeout() {
    // Condition EQUAL(x, x) is always true; the body adds 1.
    let mut cond = B::new();
    let x = cond.input(F, &[1]);
    let o = cond.output(T::TensorBool8, &[1]);
    cond.op(O::Equal, &[x, x], &[o]);
    let mut body = B::new();
    let x = body.input(F, &[1]);
    let one = body.f32c(&[1], &[1.0]);
    let act = body.int(0);
    let o = body.output(F, &[1]);
    body.op(O::Add, &[x, one, act], &[o]);
    let g = while_model(cond.g, body.g, &[&[1]], &[&[1]], vec![]);
    let p = PreparedGraph::new(g).unwrap();
    let xb = fb(&[0.0]);
    let args = [InputArg::Value {
        data: &xb,
        dimensions: vec![],
    }];
    let mut out = [0u8; 4];
    let start = Instant::now();
    let r = p.execute_with_loop_timeout(&[], &args, &mut [&mut out[..]], Duration::from_millis(20));
    assert!(matches!(r, Err(ExecError::LoopTimeout(_))), "{r:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

// ---------------------------------------------------------------- validation

/// The reason the model is refused, as text.
fn refusal(g: &Graph) -> String {
    let e = g.validate().expect_err("the model is refused");
    assert_eq!(PreparedGraph::new(g.clone()).unwrap_err(), e);
    e.to_string()
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} does not mention {p:?}");
    }
}

#[test]
fn subgraph_operand_naming_a_missing_graph_is_refused() {
    let mut g = if_model(binary(O::Add, &[2]), binary(O::Mul, &[2]));
    g.operands[4].lifetime = Lifetime::Subgraph { index: 5 };
    let msg = refusal(&g);
    assert_mentions(&msg, &["operand 4", "referenced graph 5", "has 2"]);
}

#[test]
fn subgraph_type_and_lifetime_only_come_together() {
    let mut g = if_model(binary(O::Add, &[2]), binary(O::Mul, &[2]));
    g.operands[4].ty = T::TensorFloat32;
    assert_mentions(
        &refusal(&g),
        &["operand 4", "lifetime SUBGRAPH on a TENSOR_FLOAT32"],
    );
    let mut b = B::new();
    let x = b.input(T::Subgraph, &[]);
    let y = b.input(F, &[2]);
    let o = b.output(F, &[2]);
    b.op(O::Relu, &[y], &[o]);
    let _ = x;
    assert_mentions(
        &refusal(&b.g),
        &["operand 0", "SUBGRAPH operand with lifetime"],
    );
}

#[test]
fn subgraph_that_reaches_itself_is_refused_as_recursion() {
    // Referenced 0 runs IF(c, 1, 1, x) and referenced 1 runs IF(c, 0, 0, x): 0 -> 1 -> 0.
    let mut g = link(Some((0, 0)), O::Add);
    g.referenced = vec![link(Some((1, 1)), O::Add), link(Some((0, 0)), O::Add)];
    let msg = refusal(&g);
    assert_mentions(
        &msg,
        &[
            "referenced graph 0 reaches itself",
            "referenced graph 0 -> referenced graph 1 -> referenced graph 0",
        ],
    );
}

#[test]
fn while_condition_output_other_than_bool8_is_refused() {
    // The condition computes i + n, a TENSOR_FLOAT32.
    let mut cond = B::new();
    let i = cond.input(F, &[1]);
    let _sum = cond.input(F, &[1]);
    let n = cond.input(F, &[1]);
    let act = cond.int(0);
    let o = cond.output(F, &[1]);
    cond.op(O::Add, &[i, n, act], &[o]);
    let mut g = counting_loop();
    g.referenced[0] = cond.g;
    let msg = refusal(&g);
    assert_mentions(
        &msg,
        &[
            "operation 0 (WHILE, SUBGRAPH)",
            "condition output must be TENSOR_BOOL8",
        ],
    );
}

#[test]
fn while_body_with_too_few_outputs_is_refused() {
    let mut g = counting_loop();
    // The body keeps one output: the WHILE has 2.
    let body = &mut g.referenced[1];
    let dropped = body.output_indexes.pop().unwrap_or_default();
    body.operands[dropped as usize].lifetime = Lifetime::TemporaryVariable;
    let msg = refusal(&g);
    assert_mentions(
        &msg,
        &["operation 0 (WHILE, SUBGRAPH): body has 1 outputs, needs between 2"],
    );
}

#[test]
fn while_condition_with_the_wrong_input_count_is_refused() {
    let mut g = counting_loop();
    g.referenced[0] = less_cond(2, 0, 1);
    assert_mentions(&refusal(&g), &["condition has 2 inputs, needs 3"]);
}

#[test]
fn if_branch_of_another_input_type_is_refused() {
    let mut then = binary(O::Add, &[2]);
    for o in &mut then.operands {
        if o.ty == F {
            o.ty = T::TensorInt32;
        }
    }
    let msg = refusal(&if_model(then, binary(O::Mul, &[2])));
    assert_mentions(
        &msg,
        &[
            "operation 0 (IF, TENSOR_BOOL8)",
            "then branch input 0 does not match: TENSOR_INT32 against TENSOR_FLOAT32",
        ],
    );
}

#[test]
fn if_branch_of_other_dimensions_or_input_count_is_refused() {
    let msg = refusal(&if_model(binary(O::Add, &[2]), binary(O::Mul, &[3])));
    assert_mentions(
        &msg,
        &["else branch input 0 does not match: dimensions [3] against [2]"],
    );
    let mut one_input = B::new();
    let x = one_input.input(F, &[2]);
    let o = one_input.output(F, &[2]);
    one_input.op(O::Relu, &[x], &[o]);
    let msg = refusal(&if_model(one_input.g, binary(O::Mul, &[2])));
    assert_mentions(
        &msg,
        &["then branch has 1 inputs and 1 outputs, needs 2 and 1"],
    );
}

#[test]
fn if_branch_of_another_quantization_is_refused() {
    assert_mentions(
        &refusal(&if_q8(0.25)),
        &["then branch input 0 does not match: scale 0.5"],
    );
}

#[test]
fn if_condition_other_than_one_bool8_is_refused() {
    let mut g = if_model(binary(O::Add, &[2]), binary(O::Mul, &[2]));
    g.operands[0].dimensions = vec![2];
    assert_mentions(
        &refusal(&g),
        &["input 0 (condition) must be TENSOR_BOOL8 of dimensions [1], is TENSOR_BOOL8 [2]"],
    );
}

#[test]
fn while_body_output_that_cannot_feed_its_input_is_refused() {
    let mut g = counting_loop();
    // Body output 1 (the sum) declared [2], its input [1]; the WHILE output is [0].
    let body = &mut g.referenced[1];
    let out = body.output_indexes[1] as usize;
    body.operands[out].dimensions = vec![2];
    let so = g.output_indexes[1] as usize;
    g.operands[so].dimensions = vec![0];
    assert_mentions(
        &refusal(&g),
        &["body output (fed back as the same body input) 1 does not match"],
    );
}

#[test]
fn subgraph_operand_read_by_another_operation_is_refused() {
    let mut b = B::new();
    let x = b.input(F, &[2]);
    let s = b.subgraph(0);
    let act = b.int(0);
    let o = b.output(F, &[2]);
    b.op(O::Add, &[x, s, act], &[o]);
    b.g.referenced = vec![binary(O::Add, &[2])];
    assert_mentions(
        &refusal(&b.g),
        &[
            "operation 0 (ADD",
            "input 1 is a SUBGRAPH operand, which only IF and WHILE take",
        ],
    );
    // Nor may IF pass one to a branch as a value.
    let mut g = if_model(binary(O::Add, &[2]), binary(O::Mul, &[2]));
    let s = g.operations[0].inputs[1];
    g.operations[0].inputs[4] = s;
    assert_mentions(
        &refusal(&g),
        &["input 4 is a SUBGRAPH operand where a value is expected"],
    );
}

#[test]
fn referenced_graph_that_breaks_a_rule_is_named() {
    let mut bad = binary(O::Add, &[2]);
    bad.operations[0].inputs[1] = 99;
    let g = if_model(binary(O::Add, &[2]), bad);
    let e = g.validate().unwrap_err();
    assert!(
        matches!(&e, GraphError::InReferenced { graph: 1, .. }),
        "{e:?}"
    );
    assert_mentions(
        &e.to_string(),
        &["referenced graph 1: operation 0 (ADD): input operand 99"],
    );
}

#[test]
fn referenced_graph_with_referenced_graphs_of_its_own_is_refused() {
    let mut then = binary(O::Add, &[2]);
    then.referenced = vec![binary(O::Add, &[2])];
    let g = if_model(then, binary(O::Mul, &[2]));
    assert_mentions(
        &refusal(&g),
        &["referenced graph 0 has referenced graphs of its own"],
    );
}

#[test]
fn if_with_a_branch_the_executor_cannot_run_is_unsupported() {
    // FLOOR on TENSOR_INT32 passes the structural checks but has no kernel.
    let branch = |floor: bool| {
        let mut b = B::new();
        let x = b.input(T::TensorInt32, &[2]);
        let o = b.output(T::TensorInt32, &[2]);
        b.op(if floor { O::Floor } else { O::Abs }, &[x], &[o]);
        b.g
    };
    let mut g = if_root(T::TensorInt32, 1, branch(false), branch(true));
    assert!(g.validate().is_ok());
    assert!(!g.is_operation_supported(0));
    assert_mentions(
        &g.unsupported_reason(0).unwrap_or_default(),
        &["referenced graph 1, operation 0 (FLOOR)"],
    );
    let e = PreparedGraph::new(g.clone()).unwrap_err();
    assert!(
        matches!(&e, GraphError::InReferenced { graph: 1, error } if matches!(**error, GraphError::Unsupported { index: 0, .. })),
        "{e:?}"
    );
    g.referenced[1] = branch(false);
    assert!(g.is_operation_supported(0));
}

/// A graph of inputs `(cond, x)` and one output, FLOAT32 `[2]`: `IF(cond, then, else, cond,
/// x)` over referenced graphs `branches`, or else `leaf(x, x)`.
fn link(branches: Option<(u32, u32)>, leaf: OperationType) -> Graph {
    let mut b = B::new();
    let c = b.input(T::TensorBool8, &[1]);
    let x = b.input(F, &[2]);
    let o = b.output(F, &[2]);
    match branches {
        Some((t, e)) => {
            let (t, e) = (b.subgraph(t), b.subgraph(e));
            b.op(O::If, &[c, t, e, c, x], &[o]);
        }
        None => {
            let act = b.int(0);
            b.op(leaf, &[x, x, act], &[o]);
        }
    }
    b.g
}

/// A root IF over a chain of `len` referenced graphs, each but the last running an IF into
/// the next; the last adds its input to itself.
fn if_chain(len: u32) -> Graph {
    let mut root = link(Some((0, 0)), O::Add);
    root.referenced = (0..len)
        .map(|k| link((k + 1 < len).then_some((k + 1, k + 1)), O::Add))
        .collect();
    root
}

#[test]
fn subgraphs_shared_by_several_branches_are_not_recursion() {
    // Root IF(0, 1); 0 = IF(2, 3) and 1 = IF(3, 2) both reach 2 (x + x) and 3 (x * x).
    // True: root -> 0 -> 2; false: root -> 1 -> 2 (its else). Both x + x.
    let mut g = link(Some((0, 1)), O::Add);
    g.referenced = vec![
        link(Some((2, 3)), O::Add),
        link(Some((3, 2)), O::Add),
        link(None, O::Add),
        link(None, O::Mul),
    ];
    for cond in [1, 0] {
        let outs = run_outputs(g.clone(), &[vec![cond], fb(&[3.0, -1.0])]).unwrap();
        assert_eq!(floats(&outs, 0), [6.0, -2.0]);
    }
}

#[test]
fn nesting_up_to_the_limit_runs_and_deeper_is_refused() {
    let depth = MAX_NESTING_DEPTH as u32;
    // x + x at the bottom of a chain exactly as deep as allowed.
    let outs = run_outputs(if_chain(depth), &[vec![1], fb(&[1.5, -2.0])]).unwrap();
    assert_eq!(floats(&outs, 0), [3.0, -4.0]);
    let msg = refusal(&if_chain(depth + 1));
    assert_mentions(
        &msg,
        &[
            &format!("IF/WHILE nest {} deep", depth + 1),
            "at most 32 allowed",
        ],
    );
}
