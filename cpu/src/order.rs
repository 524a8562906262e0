//! The execution order of a graph's operations (Kahn's algorithm), shared by the executor's
//! graph check and the HAL's model validation.

use std::collections::VecDeque;

/// An order in which every operation runs after the operations that write its inputs.
///
/// `operations` gives each operation's input and output operand indexes; every index must be
/// below `num_operands` (callers check that first). An operand no operation writes (a model
/// input, a constant) is ready from the start. Operations that need not wait for each other
/// keep their relative order. When no order exists, `Err` holds the operations that are in a
/// cycle or wait on one, ascending.
pub fn execution_order<'a>(
    num_operands: usize,
    operations: impl Iterator<Item = (&'a [u32], &'a [u32])> + Clone,
) -> Result<Vec<usize>, Vec<usize>> {
    let mut written = vec![false; num_operands];
    for (_, outputs) in operations.clone() {
        for &x in outputs {
            written[x as usize] = true;
        }
    }
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); num_operands];
    let mut pending: Vec<usize> = Vec::new();
    let mut outputs_of: Vec<&[u32]> = Vec::new();
    for (oi, (inputs, outputs)) in operations.enumerate() {
        let mut waits = 0;
        for &x in inputs {
            if written[x as usize] {
                readers[x as usize].push(oi);
                waits += 1;
            }
        }
        pending.push(waits);
        outputs_of.push(outputs);
    }
    let mut ready: VecDeque<usize> = (0..pending.len()).filter(|&oi| pending[oi] == 0).collect();
    let mut order = Vec::with_capacity(pending.len());
    while let Some(oi) = ready.pop_front() {
        order.push(oi);
        for &x in outputs_of[oi] {
            for &r in &readers[x as usize] {
                pending[r] -= 1;
                if pending[r] == 0 {
                    ready.push_back(r);
                }
            }
        }
    }
    if order.len() == pending.len() {
        return Ok(order);
    }
    let mut done = vec![false; pending.len()];
    for &oi in &order {
        done[oi] = true;
    }
    Err((0..pending.len()).filter(|&oi| !done[oi]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(n: usize, ops: &[(&[u32], &[u32])]) -> Result<Vec<usize>, Vec<usize>> {
        execution_order(n, ops.iter().copied())
    }

    #[test]
    fn operations_listed_out_of_order_run_after_their_writers() {
        // op 0 reads 1 (written by op 1), op 1 reads 0 (a model input).
        assert_eq!(order(3, &[(&[1], &[2]), (&[0], &[1])]), Ok(vec![1, 0]));
    }

    #[test]
    fn independent_operations_keep_their_order() {
        assert_eq!(order(4, &[(&[0], &[2]), (&[1], &[3])]), Ok(vec![0, 1]));
    }

    #[test]
    fn a_cycle_names_the_operations_in_it_and_behind_it() {
        // ops 0 and 1 feed each other; op 2 waits on op 1; op 3 is free.
        let ops: &[(&[u32], &[u32])] = &[(&[1], &[0]), (&[0], &[1]), (&[1], &[2]), (&[3], &[4])];
        assert_eq!(order(5, ops), Err(vec![0, 1, 2]));
        // An operation that reads its own output.
        assert_eq!(order(1, &[(&[0], &[0])]), Err(vec![0]));
    }
}
