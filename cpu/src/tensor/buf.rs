//! The element storage of one tensor: a vector it owns, or, for the length of one execution,
//! the caller's own bytes (an execution input read where it lies, an execution output written
//! where the caller will read it), so that large inputs and outputs are not copied through the
//! executor (`PreparedGraph::execute`).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Elements of one tensor. Reads and writes go through `Deref<Target = [T]>`; a clone always
/// owns its elements, so a borrowed `Buf` is never duplicated.
pub(crate) struct Buf<T> {
    repr: Repr<T>,
}

enum Repr<T> {
    Owned(Vec<T>),
    /// An execution input's elements in the caller's bytes, read in place; written to, they
    /// are copied first (`DerefMut`).
    Input {
        ptr: NonNull<T>,
        len: usize,
    },
    /// An execution output's elements in the caller's bytes: output `slot` of the graph.
    Output {
        ptr: NonNull<T>,
        len: usize,
        slot: usize,
    },
}

// SAFETY: an `Input` buf stands for a `&[T]` and an `Output` buf for a `&mut [T]`, the only
// one of its memory (`Buf::output`'s contract, and a clone owns its elements): sending either
// to another thread is sound when sending those references is, which `T: Send + Sync` makes
// so; an owned buf is a `Vec<T>`.
unsafe impl<T: Send + Sync> Send for Buf<T> {}
// SAFETY: as above: sharing a `&Buf` shares at most a `&[T]`.
unsafe impl<T: Send + Sync> Sync for Buf<T> {}

impl<T> Buf<T> {
    /// The elements of an execution input, read where they lie.
    ///
    /// # Safety
    /// The returned buf must be dropped before the borrow of `s` ends: it holds the memory
    /// without a lifetime. (`PreparedGraph::execute` drops every tensor of an execution before
    /// it returns.)
    pub(crate) unsafe fn input(s: &[T]) -> Self {
        Buf {
            repr: Repr::Input {
                ptr: NonNull::from(s).cast(),
                len: s.len(),
            },
        }
    }

    /// The elements of execution output `slot`, to be written where the caller reads them.
    ///
    /// # Safety
    /// As [`Buf::input`], and nothing else may read or write `s` while the buf lives.
    pub(crate) unsafe fn output(s: &mut [T], slot: usize) -> Self {
        Buf {
            repr: Repr::Output {
                ptr: NonNull::from(&mut *s).cast(),
                len: s.len(),
                slot,
            },
        }
    }

    /// The same memory as elements of `U`.
    ///
    /// # Safety
    /// `T` and `U` have the same size and alignment, and every `T` value is a valid `U`.
    pub(crate) unsafe fn cast<U>(self) -> Buf<U> {
        let repr = match self.repr {
            // SAFETY: the caller's contract is `reinterpret_vec`'s.
            Repr::Owned(v) => Repr::Owned(unsafe { super::reinterpret_vec(v) }),
            Repr::Input { ptr, len } => Repr::Input {
                ptr: ptr.cast(),
                len,
            },
            Repr::Output { ptr, len, slot } => Repr::Output {
                ptr: ptr.cast(),
                len,
                slot,
            },
        };
        Buf { repr }
    }

    /// Which execution output's bytes hold the elements, if they are written in place.
    pub(crate) fn output_slot(&self) -> Option<usize> {
        match self.repr {
            Repr::Output { slot, .. } => Some(slot),
            _ => None,
        }
    }

    /// The vector of an owned buf (for reuse by the `Arena`), or the borrowed buf back.
    pub(crate) fn into_owned(self) -> Result<Vec<T>, Self> {
        match self.repr {
            Repr::Owned(v) => Ok(v),
            repr => Err(Buf { repr }),
        }
    }
}

impl<T: Clone> Buf<T> {
    /// The elements as a vector: the owned one, or a copy of the borrowed ones.
    pub(crate) fn into_vec(self) -> Vec<T> {
        self.into_owned().unwrap_or_else(|b| b.to_vec())
    }
}

impl<T> Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: `ptr` and `len` are those of a slice the caller lent for as long as
            // this buf lives (`input` / `output` contracts), and nothing writes it meanwhile:
            // an input is only read, an output is reached only through this buf.
            Repr::Input { ptr, len } | Repr::Output { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }
}

impl<T: Clone> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self.repr {
            Repr::Owned(ref mut v) => v,
            // SAFETY: `ptr` and `len` are those of a `&mut [T]` lent for as long as this buf
            // lives, reached only through it (`output` contract), and `&mut self` makes this
            // view the only one.
            Repr::Output { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), len)
            },
            Repr::Input { .. } => {
                // The caller's input is never written: the first write copies it (and the
                // buf is owned from then on).
                self.repr = Repr::Owned(self.to_vec());
                self.deref_mut()
            }
        }
    }
}

impl<T> From<Vec<T>> for Buf<T> {
    fn from(v: Vec<T>) -> Self {
        Buf {
            repr: Repr::Owned(v),
        }
    }
}

impl<T> FromIterator<T> for Buf<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Vec::from_iter(iter).into()
    }
}

impl<T: Clone> Clone for Buf<T> {
    fn clone(&self) -> Self {
        self.to_vec().into()
    }
}

impl<T: PartialEq> PartialEq for Buf<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: fmt::Debug> fmt::Debug for Buf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: Clone> IntoIterator for Buf<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Buf<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_input_is_copied_on_its_first_write_and_the_callers_bytes_stay() {
        let given = [1.0f32, 2.0, 3.0];
        // SAFETY: `b` is dropped before `given`.
        let mut b = unsafe { Buf::input(&given[..]) };
        assert_eq!(b.as_ptr(), given.as_ptr(), "read in place");
        b[1] = 9.0;
        assert_ne!(b.as_ptr(), given.as_ptr(), "copied before the write");
        assert_eq!(&b[..], &[1.0, 9.0, 3.0]);
        assert_eq!(given, [1.0, 2.0, 3.0]);
        assert!(b.into_owned().is_ok(), "the copy is owned");
    }

    #[test]
    fn an_output_buf_writes_the_callers_bytes_and_its_clone_owns_a_copy() {
        let mut out = [0i32; 4];
        let at = out.as_ptr();
        {
            // SAFETY: `b` and its clone are dropped before `out` is used again.
            let mut b = unsafe { Buf::output(&mut out[..], 2) };
            b.copy_from_slice(&[1, 2, 3, 4]);
            assert_eq!((b.output_slot(), b.as_ptr()), (Some(2), at));
            let c = b.clone();
            assert_eq!((c.output_slot(), &c[..]), (None, &[1, 2, 3, 4][..]));
            assert_ne!(c.as_ptr(), at);
            assert!(b.into_owned().is_err(), "a borrowed buf is not kept");
        }
        assert_eq!(out, [1, 2, 3, 4]);
    }
}
