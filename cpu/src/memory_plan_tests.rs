//! The memory plan of a graph's large temporaries (`exec::MemoryPlan`): where they are placed,
//! that the ones alive at the same time never share bytes, and that executions computing in
//! the planned block give the values they gave without it.

use zerocopy::IntoBytes;

use crate::exec::MemoryPlan;
use crate::tensor::planned_places_taken_on_this_thread;
use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// Channels of the 1×1 convolutions below.
const C: u32 = 16;

/// `CONV_2D` 1×1 over C channels with identity weights and a bias of 1: `out = x + 1`.
fn plus_one(b: &mut B, x: u32, out: u32) {
    let w: Vec<f32> = (0..C * C)
        .map(|i| if i / C == i % C { 1.0 } else { 0.0 })
        .collect();
    let f = b.f32c(&[C, 1, 1, C], &w);
    let bias = b.f32c(&[C], &vec![1.0; C as usize]);
    let args = [1, 1, 1, 0].map(|v| b.int(v));
    b.op(
        O::Conv2d,
        &[x, f, bias, args[0], args[1], args[2], args[3]],
        &[out],
    );
}

/// x → +1 → +1 → … (`steps` convolutions, `steps − 1` temporaries) over `side`×`side`×C,
/// then, with `residual`, the last sum ADDed to the first temporary (alive across the chain).
fn chain(side: u32, steps: usize, residual: bool) -> Graph {
    let dims = [1, side, side, C];
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &dims);
    let mut prev = x;
    let mut first = None;
    for _ in 0..steps - 1 {
        let t = b.temp(T::TensorFloat32, &dims);
        plus_one(&mut b, prev, t);
        first.get_or_insert(t);
        prev = t;
    }
    let o = b.output(T::TensorFloat32, &dims);
    match (residual, first) {
        (true, Some(first)) => {
            let last = b.temp(T::TensorFloat32, &dims);
            plus_one(&mut b, prev, last);
            let act = b.int(0);
            b.op(O::Add, &[first, last, act], &[o]);
        }
        _ => plus_one(&mut b, prev, o),
    }
    b.g
}

/// `g` prepared, and each operand's lifetime in it: the positions, in execution order, of the
/// operation computing it and of its last reader (the end when none), found here independently
/// of the executor's plan.
fn prepared_with_lifetimes(g: Graph) -> (PreparedGraph, Vec<(usize, usize)>) {
    let ops = g.operations.iter().map(|o| (&o.inputs[..], &o.outputs[..]));
    let order = execution_order(g.operands.len(), ops).unwrap();
    let mut life = vec![(usize::MAX, order.len()); g.operands.len()];
    for (pos, &opi) in order.iter().enumerate() {
        for &i in &g.operations[opi].inputs {
            life[i as usize].1 = pos;
        }
        for &o in &g.operations[opi].outputs {
            life[o as usize].0 = pos;
        }
    }
    (PreparedGraph::new(g).unwrap(), life)
}

/// Runs `p` on `x`; its one output.
fn run(p: &PreparedGraph, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let args = [InputArg::Value {
        data: x.as_bytes(),
        dimensions: vec![],
    }];
    p.execute(&[], &args, &mut [out.as_mut_bytes()]).unwrap();
    out
}

/// Every two planned operands alive at the same time occupy disjoint bytes inside the block.
fn assert_disjoint_while_alive(plan: &MemoryPlan, life: &[(usize, usize)]) {
    let planned: Vec<(usize, (usize, usize))> = plan
        .at
        .iter()
        .enumerate()
        .filter_map(|(i, at)| at.map(|at| (i, at)))
        .collect();
    for &(i, (off, bytes)) in &planned {
        assert!(off + bytes <= plan.bytes, "operand {i} past the block");
        assert_eq!(off % CACHE_LINE, 0, "operand {i} off a cache line");
        for &(j, (off2, bytes2)) in &planned {
            let together = life[i].0 <= life[j].1 && life[j].0 <= life[i].1;
            let overlap = off < off2 + bytes2 && off2 < off + bytes;
            assert!(
                i == j || !together || !overlap,
                "operands {i} and {j} share bytes"
            );
        }
    }
}

fn input(side: u32) -> Vec<f32> {
    (0..side * side * C).map(|i| (i % 7) as f32 - 3.0).collect()
}

#[test]
fn a_chain_of_large_temporaries_takes_two_regions_and_computes_the_same_values() {
    // 32×32×16 floats: 64 KiB per temporary, 4 of them, each alive for one step.
    let (p, life) = prepared_with_lifetimes(chain(32, 5, false));
    let plan = p.memory_plan();
    let tensor = 32 * 32 * C as usize * 4;
    assert_eq!(plan.at.iter().flatten().count(), 4);
    assert_eq!(
        plan.bytes,
        2 * tensor,
        "dead temporaries' bytes are used again"
    );
    assert_disjoint_while_alive(plan, &life);

    let before = planned_places_taken_on_this_thread();
    let x = input(32);
    let out = run(&p, &x);
    assert_eq!(planned_places_taken_on_this_thread() - before, 4);
    let want: Vec<f32> = x.iter().map(|v| v + 5.0).collect();
    assert_eq!(out, want);
}

#[test]
fn a_temporary_read_again_later_keeps_its_bytes_while_the_chain_runs_past_it() {
    let (p, life) = prepared_with_lifetimes(chain(32, 5, true));
    let plan = p.memory_plan();
    assert_eq!(plan.at.iter().flatten().count(), 5);
    assert!(plan.bytes >= 3 * 32 * 32 * C as usize * 4);
    assert_disjoint_while_alive(plan, &life);
    let x = input(32);
    let out = run(&p, &x);
    // The first temporary (x + 1) plus the chain's last (x + 5).
    let want: Vec<f32> = x.iter().map(|v| 2.0 * v + 6.0).collect();
    assert_eq!(out, want);
}

#[test]
fn small_temporaries_are_left_to_the_arena() {
    // 4×4×16 floats: 1 KiB, below the planned size.
    let (p, _) = prepared_with_lifetimes(chain(4, 5, false));
    let plan = p.memory_plan();
    assert_eq!(plan.bytes, 0);
    assert!(plan.at.iter().all(Option::is_none));
    let before = planned_places_taken_on_this_thread();
    let x = input(4);
    let out = run(&p, &x);
    assert_eq!(planned_places_taken_on_this_thread(), before);
    assert_eq!(out, x.iter().map(|v| v + 5.0).collect::<Vec<_>>());
}

#[test]
fn executions_on_several_threads_at_once_each_compute_in_their_own_block() {
    let p = PreparedGraph::new(chain(32, 6, true)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let p = &p;
            s.spawn(move || {
                for k in 0..12 {
                    let x: Vec<f32> = input(32).iter().map(|v| v + (t * 100 + k) as f32).collect();
                    let out = run(p, &x);
                    // x + 1 and x + 6.
                    let want: Vec<f32> = x.iter().map(|v| 2.0 * v + 7.0).collect();
                    assert_eq!(out, want, "thread {t}, execution {k}");
                }
            });
        }
    });
}
