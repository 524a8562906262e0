//! Runtime tensor values: typed element storage decoded from little-endian bytes.

use std::mem::MaybeUninit;

use crate::model::OperandType;
use zerocopy::{FromBytes, IntoBytes};

mod buf;
pub(crate) use buf::Buf;

/// Largest number of elements one tensor may have (guards allocations driven by input values).
const MAX_ELEMENTS: usize = 1 << 28;

/// Typed element storage. Several operand types share one storage kind (see [`kind_of`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    /// FLOAT32, TENSOR_FLOAT32; also FLOAT16, TENSOR_FLOAT16 (widened on decode).
    F32(Buf<f32>),
    /// INT32, UINT32 (bit pattern), TENSOR_INT32.
    I32(Buf<i32>),
    /// TENSOR_QUANT8_ASYMM, BOOL, TENSOR_BOOL8.
    U8(Buf<u8>),
    /// TENSOR_QUANT8_SYMM, TENSOR_QUANT8_SYMM_PER_CHANNEL, TENSOR_QUANT8_ASYMM_SIGNED.
    I8(Buf<i8>),
    /// TENSOR_QUANT16_SYMM.
    I16(Buf<i16>),
    /// TENSOR_QUANT16_ASYMM.
    U16(Buf<u16>),
}

/// Storage kind tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    F32,
    I32,
    U8,
    I8,
    I16,
    U16,
}

pub(crate) fn kind_of(ty: OperandType) -> Kind {
    use OperandType::*;
    match ty {
        Float32 | TensorFloat32 | Float16 | TensorFloat16 => Kind::F32,
        Int32 | Uint32 | TensorInt32 => Kind::I32,
        // SUBGRAPH operands hold no elements; U8 keeps their (empty) data harmless.
        TensorQuant8Asymm | Bool | TensorBool8 | Subgraph => Kind::U8,
        TensorQuant8Symm | TensorQuant8SymmPerChannel | TensorQuant8AsymmSigned => Kind::I8,
        TensorQuant16Symm => Kind::I16,
        TensorQuant16Asymm => Kind::U16,
    }
}

impl Data {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Data::F32(_) => Kind::F32,
            Data::I32(_) => Kind::I32,
            Data::U8(_) => Kind::U8,
            Data::I8(_) => Kind::I8,
            Data::I16(_) => Kind::I16,
            Data::U16(_) => Kind::U16,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::I8(v) => v.len(),
            Data::I16(v) => v.len(),
            Data::U16(v) => v.len(),
        }
    }

    /// Decodes little-endian `bytes` holding elements of operand type `ty`.
    pub(crate) fn decode(ty: OperandType, bytes: &[u8]) -> Data {
        if matches!(ty, OperandType::Float16 | OperandType::TensorFloat16) {
            return Data::F32(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
            );
        }
        /// Each `N`-byte chunk of `bytes` through `from`, into a reused buffer when an
        /// execution is running (inputs decoded per execution).
        fn get<T: Reusable, const N: usize>(bytes: &[u8], from: impl Fn([u8; N]) -> T) -> Vec<T> {
            let chunks = bytes.chunks_exact(N);
            let mut v = output_buffer::<T>(chunks.len());
            for (o, c) in v.iter_mut().zip(chunks) {
                if let Ok(c) = <[u8; N]>::try_from(c) {
                    *o = from(c);
                }
            }
            v
        }
        /// [`get`] for a type of `N` bytes whose every bit pattern is a value: a byte copy on
        /// a little-endian target, where the values are stored as they sit in memory (the
        /// per-value conversion ran at 7 GB/s: 0.9% of MobileNetV2 float32 on its input).
        fn get_plain<T: Reusable + FromBytes + IntoBytes, const N: usize>(
            bytes: &[u8],
            from: impl Fn([u8; N]) -> T,
        ) -> Vec<T> {
            const { assert!(std::mem::size_of::<T>() == N) };
            if cfg!(target_endian = "big") {
                return get(bytes, from);
            }
            let n = bytes.len() / N;
            let mut v = output_buffer::<T>(n);
            v.as_mut_bytes().copy_from_slice(&bytes[..n * N]);
            v
        }
        match kind_of(ty) {
            Kind::F32 => Data::F32(get_plain(bytes, f32::from_le_bytes).into()),
            Kind::I32 => Data::I32(get_plain(bytes, i32::from_le_bytes).into()),
            Kind::U8 => Data::U8(get(bytes, |[b]: [u8; 1]| b).into()),
            Kind::I8 => Data::I8(get(bytes, |[b]: [u8; 1]| b as i8).into()),
            Kind::I16 => Data::I16(
                bytes
                    .chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            Kind::U16 => Data::U16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
        }
    }

    /// The elements of an execution input of operand type `ty`: read where they lie in `bytes`
    /// when they are stored as the executor keeps them (a little-endian target, a type other
    /// than FLOAT16, `bytes` aligned for the element), else decoded ([`Data::decode`]).
    ///
    /// # Safety
    /// The returned data, and every tensor holding it, must be dropped before the borrow of
    /// `bytes` ends ([`Buf::input`]).
    pub(crate) unsafe fn lend(ty: OperandType, bytes: &[u8]) -> Data {
        /// `bytes` as a borrowed buf of `T`, when they hold whole aligned elements.
        ///
        /// # Safety
        /// As [`Data::lend`].
        unsafe fn lent<T: FromBytes + zerocopy::Immutable>(bytes: &[u8]) -> Option<Buf<T>> {
            let s = <[T]>::ref_from_bytes(bytes).ok()?;
            // SAFETY: the caller drops the buf before the borrow of `bytes` ends.
            Some(unsafe { Buf::input(s) })
        }
        if stored_as_kept(ty) {
            // The caller drops the data before the borrow of `bytes` ends (each SAFETY below).
            let lent = match kind_of(ty) {
                // SAFETY: as above.
                Kind::F32 => unsafe { lent(bytes) }.map(Data::F32),
                // SAFETY: as above.
                Kind::I32 => unsafe { lent(bytes) }.map(Data::I32),
                // SAFETY: as above.
                Kind::U8 => unsafe { lent(bytes) }.map(Data::U8),
                // SAFETY: as above.
                Kind::I8 => unsafe { lent(bytes) }.map(Data::I8),
                Kind::I16 | Kind::U16 => None,
            };
            if let Some(d) = lent {
                return d;
            }
        }
        #[cfg(test)]
        note_io_copy(bytes.len());
        Data::decode(ty, bytes)
    }

    /// Which execution output's bytes hold the elements, when they were written in place
    /// ([`offer`]).
    pub(crate) fn output_slot(&self) -> Option<usize> {
        match self {
            Data::F32(v) => v.output_slot(),
            Data::I32(v) => v.output_slot(),
            Data::U8(v) => v.output_slot(),
            Data::I8(v) => v.output_slot(),
            Data::I16(v) => v.output_slot(),
            Data::U16(v) => v.output_slot(),
        }
    }

    /// Encodes as elements of operand type `ty` into `out` (at least `len() * element_size`).
    pub(crate) fn encode(&self, ty: OperandType, out: &mut [u8]) {
        /// Writes each `x` of `v` as its `N` bytes `le(x)` into consecutive chunks of `out`.
        fn put<T: Copy, const N: usize>(out: &mut [u8], v: &[T], le: impl Fn(T) -> [u8; N]) {
            for (o, &x) in out.chunks_exact_mut(N).zip(v) {
                o.copy_from_slice(&le(x));
            }
        }
        match (self, ty) {
            (Data::F32(v), OperandType::Float16 | OperandType::TensorFloat16) => {
                put(out, v, |x| f32_to_f16(x).to_le_bytes())
            }
            (Data::F32(v), _) => put(out, v, f32::to_le_bytes),
            (Data::I32(v), _) => put(out, v, i32::to_le_bytes),
            (Data::U8(v), _) => put(out, v, |x| [x]),
            (Data::I8(v), _) => put(out, v, i8::to_le_bytes),
            (Data::I16(v), _) => put(out, v, i16::to_le_bytes),
            (Data::U16(v), _) => put(out, v, u16::to_le_bytes),
        }
    }

    /// Gathers elements by index: `out[i] = self[idx[i]]` (same kind).
    pub(crate) fn gather(&self, idx: &[usize]) -> Data {
        fn g<T: Copy>(v: &[T], idx: &[usize]) -> Vec<T> {
            idx.iter().map(|&i| v[i]).collect()
        }
        match self {
            Data::F32(v) => Data::F32(g(v, idx).into()),
            Data::I32(v) => Data::I32(g(v, idx).into()),
            Data::U8(v) => Data::U8(g(v, idx).into()),
            Data::I8(v) => Data::I8(g(v, idx).into()),
            Data::I16(v) => Data::I16(g(v, idx).into()),
            Data::U16(v) => Data::U16(g(v, idx).into()),
        }
    }
}

/// A runtime value: dimensions plus elements.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tensor {
    pub(crate) dims: Vec<u32>,
    pub(crate) data: Data,
}

impl Tensor {
    pub(crate) fn new(dims: Vec<u32>, data: Data) -> Self {
        Tensor { dims, data }
    }
}

/// Activation buffers for reuse: the element storage of tensors an execution no longer needs,
/// handed to kernels for their outputs instead of fresh allocations (which cost a memset of
/// every byte, and page faults for large blocks, on every execution). One arena serves one
/// execution at a time: [`PreparedGraph`](crate::PreparedGraph) keeps a stack of them and an
/// execution installs one on its thread ([`install`]), so executions on several threads never
/// share buffers, and the buffers of one execution serve the next.
#[derive(Default)]
pub(crate) struct Arena {
    f32: Vec<Vec<f32>>,
    i32: Vec<Vec<i32>>,
    /// Byte buffers, of U8 and I8 tensors both (an 8-bit kernel may write bytes and hand them
    /// over as either).
    bytes: Vec<Vec<u8>>,
    /// The block of the graph's memory plan (the executor's `MemoryPlan`), kept for the next
    /// execution; taken out while an execution runs.
    pub(crate) block: Vec<u8>,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Arena({} f32, {} i32, {} byte buffers)",
            self.f32.len(),
            self.i32.len(),
            self.bytes.len()
        )
    }
}

/// Buffers an arena keeps per element type, at most: a graph has few activations alive at
/// once, and each step of a deterministic execution finds its buffer again.
const ARENA_BUFFERS: usize = 32;

/// An element type whose buffers an [`Arena`] keeps.
pub(crate) trait Reusable: Copy + Default + 'static {
    /// A value no kernel's output should hold (tests fill handed-out buffers with it, so a
    /// kernel that leaves an element unwritten shows).
    #[cfg(test)]
    const POISON: Self;
    /// The storage kind of a tensor of these elements.
    const KIND: Kind;
    /// A buffer of `n` elements (contents unspecified) from `arena`, see [`Arena::take`].
    fn take(arena: &mut Arena, n: usize) -> Vec<Self> {
        match Self::take_spare(arena, n) {
            Some(mut v) => {
                v.resize(n, Self::default());
                v
            }
            None => vec![Self::default(); n],
        }
    }
    /// A kept buffer with room for `n` elements, at most `n` long, see [`Arena::take_spare`].
    fn take_spare(arena: &mut Arena, n: usize) -> Option<Vec<Self>>;
    /// Keeps `v` in `arena`.
    fn keep(arena: &mut Arena, v: Vec<Self>);
}

/// `Reusable` for an element type kept in its own list of the arena.
macro_rules! reusable {
    ($t:ty, $list:ident, $kind:ident, $poison:expr) => {
        impl Reusable for $t {
            #[cfg(test)]
            const POISON: Self = $poison;
            const KIND: Kind = Kind::$kind;
            fn take_spare(arena: &mut Arena, n: usize) -> Option<Vec<Self>> {
                Arena::take_spare(&mut arena.$list, n)
            }
            fn keep(arena: &mut Arena, v: Vec<Self>) {
                Arena::keep(&mut arena.$list, v)
            }
        }
    };
}
reusable!(f32, f32, F32, f32::NAN);
reusable!(i32, i32, I32, i32::MIN + 0x5a5a);
reusable!(u8, bytes, U8, 0xa5);

impl Reusable for i8 {
    #[cfg(test)]
    const POISON: Self = -0x5b;
    const KIND: Kind = Kind::I8;
    fn take_spare(arena: &mut Arena, n: usize) -> Option<Vec<Self>> {
        Arena::take_spare(&mut arena.bytes, n).map(bytes_as::<u8, i8>)
    }
    fn keep(arena: &mut Arena, v: Vec<Self>) {
        Arena::keep(&mut arena.bytes, bytes_as::<i8, u8>(v))
    }
}

/// The bytes of `s` as stored (each i8 as its two's complement byte), without copying.
pub(crate) fn i8_bytes(s: &[i8]) -> &[u8] {
    s.as_bytes()
}

/// The bytes of `s` as stored, mutably (see [`i8_bytes`]).
pub(crate) fn i8_bytes_mut(s: &mut [i8]) -> &mut [u8] {
    s.as_mut_bytes()
}

/// A byte buffer's allocation as the other byte type, without copying.
pub(crate) fn bytes_as<A: Byte, B: Byte>(v: Vec<A>) -> Vec<B> {
    // SAFETY: `Byte` is implemented only for u8 and i8, which have the same size (1) and
    // alignment (1), and every bit pattern is a valid value of both.
    unsafe { reinterpret_vec(v) }
}

/// A byte buf as the other byte type, without copying.
pub(crate) fn bytes_buf_as<A: Byte, B: Byte>(b: Buf<A>) -> Buf<B> {
    // SAFETY: as in `bytes_as`.
    unsafe { b.cast() }
}

/// `v`'s allocation, length and capacity as a vector of `B`, without copying.
///
/// # Safety
/// `A` and `B` have the same size and alignment, and `v`'s first `len` elements are valid
/// values of `B`.
unsafe fn reinterpret_vec<A, B>(v: Vec<A>) -> Vec<B> {
    let mut v = std::mem::ManuallyDrop::new(v);
    let (ptr, len, cap) = (v.as_mut_ptr(), v.len(), v.capacity());
    // SAFETY: with A's size and alignment (the caller's contract), the allocation of `cap`
    // elements has the layout a Vec<B> of that capacity expects, and its first `len` elements
    // are valid B values (contract); it is handed over whole (`v` is never used or dropped
    // again).
    unsafe { Vec::from_raw_parts(ptr.cast::<B>(), len, cap) }
}

/// u8 and i8 (see [`bytes_as`]).
pub(crate) trait Byte {}
impl Byte for u8 {}
impl Byte for i8 {}

impl Arena {
    /// A buffer with room for `n` elements and at most `n` long: the smallest kept one already
    /// `n` long or longer (truncated to `n`: its contents left from the tensor it held), else
    /// the smallest that can hold `n` (as long as it was); else None, and the largest kept
    /// buffer is dropped (too small for this step, it would stay too small in the next
    /// execution), for a new one. [`Reusable::take`] then clears the elements up to `n` past
    /// its length (a memset); [`output_buffer_uninit`] does not.
    fn take_spare<T: Copy + Default>(list: &mut Vec<Vec<T>>, n: usize) -> Option<Vec<T>> {
        let smallest = |min: fn(&Vec<T>) -> usize| {
            list.iter()
                .enumerate()
                .filter(|(_, v)| min(v) >= n)
                .min_by_key(|(_, v)| v.capacity())
                .map(|(i, _)| i)
        };
        let fit = smallest(Vec::len).or_else(|| smallest(Vec::capacity));
        match fit {
            Some(i) => {
                let mut v = list.swap_remove(i);
                v.truncate(n);
                Some(v)
            }
            None => {
                let largest = list
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, v)| v.capacity())
                    .map(|(i, _)| i);
                if let Some(i) = largest {
                    list.swap_remove(i);
                }
                None
            }
        }
    }

    /// Keeps `v`; with [`ARENA_BUFFERS`] kept already, in place of the smallest kept one if
    /// `v` is larger. Keeping the largest matters: an execution can hand back buffers that
    /// did not come from the arena (a kernel's own `Vec`, small ones such as a classifier's
    /// logits, one more every execution), and when those filled the list the large buffers
    /// recycled after them were dropped, so every execution grew and cleared the few large
    /// ones left (a memset of 7-9% of MobileNetV2's float32 time).
    fn keep<T>(list: &mut Vec<Vec<T>>, v: Vec<T>) {
        if v.capacity() == 0 {
            return;
        }
        if list.len() < ARENA_BUFFERS {
            list.push(v);
            return;
        }
        if let Some(smallest) = list.iter_mut().min_by_key(|b| b.capacity()) {
            if smallest.capacity() < v.capacity() {
                *smallest = v;
            }
        }
    }

    /// Keeps the storage of a tensor no longer needed.
    pub(crate) fn recycle(&mut self, d: Data) {
        // A borrowed buf (an execution's input or output, in the caller's bytes) is not kept.
        match d {
            Data::F32(v) => v.into_owned().map_or((), |v| f32::keep(self, v)),
            Data::I32(v) => v.into_owned().map_or((), |v| i32::keep(self, v)),
            Data::U8(v) => v.into_owned().map_or((), |v| u8::keep(self, v)),
            Data::I8(v) => v.into_owned().map_or((), |v| i8::keep(self, v)),
            Data::I16(_) | Data::U16(_) => {}
        }
    }

    /// Elements held, over all kept buffers.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        fn cap<T>(l: &[Vec<T>]) -> usize {
            l.iter().map(Vec::capacity).sum()
        }
        cap(&self.f32) + cap(&self.i32) + cap(&self.bytes)
    }
}

thread_local! {
    /// The arena of the execution running on this thread, if any.
    static ARENA: std::cell::RefCell<Option<Arena>> = const { std::cell::RefCell::new(None) };
}

/// Installs `arena` on this thread for one execution; [`ArenaGuard::finish`] takes it back.
/// Dropped without `finish` (a kernel panicked), the guard uninstalls the arena and frees it.
/// With an arena already installed on this thread, that one keeps serving and `arena` is
/// dropped.
pub(crate) fn install(arena: Arena) -> ArenaGuard {
    let installed = ARENA.with_borrow_mut(|slot| {
        if slot.is_none() {
            *slot = Some(arena);
            true
        } else {
            false
        }
    });
    ArenaGuard { installed }
}

/// Returned by [`install`].
pub(crate) struct ArenaGuard {
    installed: bool,
}

impl ArenaGuard {
    /// Uninstalls the arena and returns it (None if this guard did not install one).
    pub(crate) fn finish(mut self) -> Option<Arena> {
        self.take()
    }

    fn take(&mut self) -> Option<Arena> {
        if !std::mem::take(&mut self.installed) {
            return None;
        }
        ARENA.with_borrow_mut(Option::take)
    }
}

impl Drop for ArenaGuard {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// A buffer of `n` elements for a kernel that writes every one of them: from this thread's
/// arena when an execution installed one (contents unspecified: left from an earlier tensor),
/// else zeroed. Tests fill it with [`Reusable::POISON`].
pub(crate) fn output_buffer<T: Reusable>(n: usize) -> Vec<T> {
    #[allow(unused_mut)]
    let mut v = ARENA
        .with_borrow_mut(|slot| slot.as_mut().map(|a| T::take(a, n)))
        .unwrap_or_else(|| vec![T::default(); n]);
    #[cfg(test)]
    v.fill(T::POISON);
    v
}

/// A buffer of `n` elements for a kernel that writes every one of them through
/// `MaybeUninit::write`, then hands it to [`assume_written`]: as [`output_buffer`], but the
/// elements past a kept buffer's length, or of a new buffer, are not cleared first (a memset
/// of up to the whole buffer, on every execution where a buffer serves a larger tensor than
/// it last held). When the running operation computes an execution output whose bytes were
/// offered ([`offer`]) and can hold the `n` elements, it is those bytes: the kernel writes the
/// output where the caller reads it. Tests fill it with [`Reusable::POISON`].
pub(crate) fn output_buffer_uninit<T: Reusable>(n: usize) -> OutputBuf<T> {
    #[allow(unused_mut)]
    if let Some(mut b) = take_place::<T>(n) {
        #[cfg(test)]
        b.fill(T::POISON);
        return OutputBuf::Placed(b);
    }
    let v = ARENA
        .with_borrow_mut(|slot| slot.as_mut().and_then(|a| T::take_spare(a, n)))
        .unwrap_or_default();
    // SAFETY: `MaybeUninit<T>` has the size and alignment of `T`, and every initialized T is
    // a valid MaybeUninit<T>.
    let mut u: Vec<MaybeUninit<T>> = unsafe { reinterpret_vec(v) };
    // Room for n (a kept buffer has it already; this is the fallback's allocation).
    u.reserve_exact(n.saturating_sub(u.len()));
    // SAFETY: n <= capacity (reserved just above), and the elements are `MaybeUninit`, which
    // need no initialization.
    unsafe { u.set_len(n) };
    #[cfg(test)]
    for e in &mut u {
        e.write(T::POISON);
    }
    OutputBuf::Own(u)
}

/// What [`output_buffer_uninit`] hands a kernel.
pub(crate) enum OutputBuf<T> {
    /// A buffer of the executor's own.
    Own(Vec<MaybeUninit<T>>),
    /// The caller's bytes of the execution output being computed (see [`offer`]).
    Placed(Buf<T>),
}

impl<T> OutputBuf<T> {
    pub(crate) fn len(&self) -> usize {
        match self {
            OutputBuf::Own(v) => v.len(),
            OutputBuf::Placed(b) => b.len(),
        }
    }

    /// The elements, for the kernel to write.
    ///
    /// # Safety
    /// As [`as_uninit`]: only initialized values may be written through the view (placed, it
    /// is the caller's initialized output).
    pub(crate) unsafe fn uninit(&mut self) -> &mut [MaybeUninit<T>]
    where
        T: Clone,
    {
        match self {
            OutputBuf::Own(v) => v,
            // SAFETY: the caller's contract is `as_uninit`'s.
            OutputBuf::Placed(b) => unsafe { as_uninit(b) },
        }
    }
}

/// Whether operand type `ty`'s bytes hold its elements as the executor keeps them (so that
/// they can be read and written in place): a little-endian target, and not FLOAT16 (widened
/// to f32).
pub(crate) fn stored_as_kept(ty: OperandType) -> bool {
    cfg!(target_endian = "little")
        && !matches!(ty, OperandType::Float16 | OperandType::TensorFloat16)
}

/// The bytes of one execution output, offered ([`offer`]) to the operation that computes it so
/// that its kernel writes them in place of a buffer of its own (then copied).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    ptr: std::ptr::NonNull<u8>,
    bytes: usize,
    kind: Kind,
    slot: usize,
}

impl Place {
    /// `out`, the bytes of execution output `slot`, of operand type `ty`, as a place; None
    /// when the elements the executor keeps for that type cannot be written there as they sit
    /// in memory (a big-endian target, FLOAT16 widened to f32, 16-bit kinds, `out` not aligned
    /// for the element).
    ///
    /// # Safety
    /// `out` must be neither read nor written by anyone else, and stay valid, until every
    /// tensor made from the place is dropped: [`output_buffer_uninit`] hands it out as a
    /// borrowed [`Buf`] without a lifetime.
    pub(crate) unsafe fn new(out: &mut [u8], ty: OperandType, slot: usize) -> Option<Place> {
        let bytes = out.len();
        // SAFETY: `out` is valid for reads and writes of its bytes; the rest is the caller's.
        unsafe { Place::from_raw(std::ptr::NonNull::from(out).cast(), bytes, ty, slot) }
    }

    /// As [`Place::new`], for the `bytes` bytes at `ptr`: no reference to them is made, so
    /// places in one block (a memory plan's) may be made from its base pointer while others
    /// made from it are in use.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `bytes` bytes, and [`Place::new`]'s contract
    /// hold for them.
    pub(crate) unsafe fn from_raw(
        ptr: std::ptr::NonNull<u8>,
        bytes: usize,
        ty: OperandType,
        slot: usize,
    ) -> Option<Place> {
        let kind = kind_of(ty);
        let align = match kind {
            Kind::F32 => std::mem::align_of::<f32>(),
            Kind::I32 => std::mem::align_of::<i32>(),
            Kind::U8 | Kind::I8 => 1,
            // No kernel writes 16-bit elements into an output buffer it asks for.
            Kind::I16 | Kind::U16 => return None,
        };
        if !stored_as_kept(ty) || ptr.as_ptr() as usize % align != 0 {
            return None;
        }
        Some(Place {
            ptr,
            bytes,
            kind,
            slot,
        })
    }

    /// Whether a kernel's buffer of `n` elements of `T` may be this place.
    fn serves<T: Reusable>(&self, n: usize) -> bool {
        let byte_kinds = |k| matches!(k, Kind::U8 | Kind::I8);
        let kind_fits = self.kind == T::KIND || (byte_kinds(self.kind) && byte_kinds(T::KIND));
        let bytes = n.checked_mul(std::mem::size_of::<T>());
        n > 0 && kind_fits && bytes.is_some_and(|b| b <= self.bytes)
    }
}

#[cfg(test)]
thread_local! {
    /// Bytes of execution inputs and outputs copied on this thread, not read or written in
    /// place ([`io_bytes_copied_on_this_thread`]).
    static IO_COPIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The slot of a [`Place`] in a memory plan's block (the executor's `MemoryPlan`): no
/// execution output's.
pub(crate) const PLANNED_SLOT: usize = usize::MAX;

#[cfg(test)]
thread_local! {
    /// Places in a memory plan's block taken on this thread.
    static PLANNED_TAKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Temporaries computed in a memory plan's block on this thread so far.
#[cfg(test)]
pub(crate) fn planned_places_taken_on_this_thread() -> usize {
    PLANNED_TAKEN.get()
}

/// Counts `bytes` of an execution's input or output copied instead of used in place.
#[cfg(test)]
pub(crate) fn note_io_copy(bytes: usize) {
    IO_COPIED.set(IO_COPIED.get() + bytes);
}

/// Bytes of execution inputs and outputs copied on this thread so far (the rest were read or
/// written where the caller holds them).
#[cfg(test)]
pub(crate) fn io_bytes_copied_on_this_thread() -> usize {
    IO_COPIED.get()
}

thread_local! {
    /// The execution output offered to the operation running on this thread, if any.
    static PLACE: std::cell::Cell<Option<Place>> = const { std::cell::Cell::new(None) };
}

/// Offers `place` to the operation about to run on this thread: the first
/// [`output_buffer_uninit`] call it serves takes it. The offer ends when the returned guard
/// is dropped, taken or not.
pub(crate) fn offer(place: Place) -> Offer {
    PLACE.set(Some(place));
    Offer(())
}

/// Returned by [`offer`].
pub(crate) struct Offer(());

impl Drop for Offer {
    fn drop(&mut self) {
        PLACE.set(None);
    }
}

/// The offered place as `n` elements of `T`, if it serves them; the offer is then taken.
fn take_place<T: Reusable>(n: usize) -> Option<Buf<T>> {
    let place = PLACE.get().filter(|p| p.serves::<T>(n))?;
    PLACE.set(None);
    #[cfg(test)]
    if place.slot == PLANNED_SLOT {
        PLANNED_TAKEN.set(PLANNED_TAKEN.get() + 1);
    }
    let ptr = place.ptr.as_ptr().cast::<T>();
    // SAFETY: `Place::new` checked the alignment for T's kind (a byte kind for either byte
    // type), `serves` that n elements of T fit the place's bytes, and every bit pattern is a
    // T; the bytes stay valid and reached only through this slice, and the buf made from it,
    // until that buf is dropped (`Place::new`'s contract), and the offer is taken, so no
    // second buf is made.
    let s = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
    // SAFETY: as above: the buf is dropped before the caller's bytes are used again.
    Some(unsafe { Buf::output(s, place.slot) })
}

/// `s` seen as memory a kernel overwrites (the kernels that take their output as
/// `MaybeUninit`, so that a fresh buffer need not be cleared first, writing into a buffer that
/// is initialized already).
///
/// # Safety
/// Whoever writes through the view must write only initialized values (`MaybeUninit::write`,
/// or a vector store of initialized lanes), never `MaybeUninit::uninit()`: `s` must stay
/// initialized.
pub(crate) unsafe fn as_uninit<T>(s: &mut [T]) -> &mut [MaybeUninit<T>] {
    let len = s.len();
    // SAFETY: `MaybeUninit<T>` has the size and alignment of `T`; the view borrows `s`
    // exclusively for its lifetime, and the caller writes only initialized values through it.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<MaybeUninit<T>>(), len) }
}

/// The buffer of [`output_buffer_uninit`] once written.
///
/// # Safety
/// Every element of `v` has been written (`MaybeUninit::write`, or a store of initialized
/// values).
pub(crate) unsafe fn assume_written<T>(v: OutputBuf<T>) -> Buf<T> {
    match v {
        // SAFETY: `T` has the size and alignment of `MaybeUninit<T>`, and every element of
        // `v` is initialized (the caller's contract).
        OutputBuf::Own(v) => unsafe { reinterpret_vec::<MaybeUninit<T>, T>(v) }.into(),
        OutputBuf::Placed(b) => b,
    }
}

/// Hands the storage of a tensor no longer needed to this thread's arena, if any.
pub(crate) fn recycle(d: Data) {
    ARENA.with_borrow_mut(|slot| {
        if let Some(a) = slot.as_mut() {
            a.recycle(d);
        }
    });
}

/// Product of extents with overflow and size-cap checks.
pub(crate) fn num_elements(dims: &[u32]) -> Option<usize> {
    let mut n: usize = 1;
    for &d in dims {
        n = n.checked_mul(d as usize)?;
    }
    if n > MAX_ELEMENTS { None } else { Some(n) }
}

/// Converts an IEEE half-precision bit pattern to f32.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = if exp == 0 {
        if frac == 0 {
            sign
        } else {
            // subnormal: value = frac * 2^-24
            return if sign != 0 { -1.0 } else { 1.0 } * frac as f32 * 2f32.powi(-24);
        }
    } else if exp == 0x1f {
        sign | (0xff << 23) | (frac << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (frac << 13)
    };
    f32::from_bits(bits)
}

/// Converts f32 to IEEE half precision, rounding to nearest even.
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let mant = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let r = if rem > halfway || (rem == halfway && half & 1 == 1) {
            half + 1
        } else {
            half
        };
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        r += 1;
    }
    sign | r as u16
}

/// Whether `ty` is a floating-point tensor type (FLOAT32 or FLOAT16 storage widened to f32).
pub(crate) fn is_float(ty: OperandType) -> bool {
    matches!(ty, OperandType::TensorFloat32 | OperandType::TensorFloat16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_arena_keeps_a_large_buffer_in_place_of_its_smallest_one() {
        let mut a = Arena::default();
        for _ in 0..ARENA_BUFFERS {
            f32::keep(&mut a, vec![0.0; 10]);
        }
        // Smaller than every kept buffer: dropped.
        f32::keep(&mut a, vec![0.0; 5]);
        assert_eq!(a.held(), ARENA_BUFFERS * 10);
        // Larger: kept in place of one of the smallest.
        f32::keep(&mut a, vec![1.0; 1000]);
        assert_eq!(a.f32.len(), ARENA_BUFFERS);
        assert_eq!(a.held(), (ARENA_BUFFERS - 1) * 10 + 1000);
        // And handed out again whole, without growing: it left the list.
        let v = f32::take(&mut a, 1000);
        assert_eq!((v.len(), v.capacity()), (1000, 1000));
        assert_eq!(a.f32.len(), ARENA_BUFFERS - 1);
    }

    #[test]
    fn an_uninit_output_buffer_grows_a_kept_buffer_in_place_and_take_clears_the_growth() {
        let mut kept = Vec::with_capacity(1000);
        kept.extend_from_slice(&[7.0f32; 100]);
        let at = kept.as_ptr();
        let mut a = Arena::default();
        f32::keep(&mut a, kept);
        let guard = install(a);
        // Longer than the kept buffer, within its capacity: the same allocation, 600 long,
        // poisoned in tests (so a kernel that skips an element shows).
        let v = output_buffer_uninit::<f32>(600);
        // SAFETY: every element was written (the test build's poison).
        let v = unsafe { assume_written(v) };
        assert_eq!((v.len(), v.as_ptr()), (600, at));
        assert!(v.iter().all(|x| x.is_nan()));
        recycle(Data::F32(v));
        let mut a = guard.finish().expect("installed");
        // Taken the clearing way, the same buffer comes back with its growth cleared.
        let kept = f32::take(&mut a, 600);
        assert_eq!(kept.as_ptr(), at);
        let mut short = kept;
        short.truncate(10);
        f32::keep(&mut a, short);
        let grown = f32::take(&mut a, 50);
        assert_eq!(grown.as_ptr(), at);
        assert!(grown[10..].iter().all(|&x| x == 0.0), "{grown:?}");
        // With no arena installed: a new buffer of the length asked for.
        let fresh = output_buffer_uninit::<u8>(33);
        assert_eq!(fresh.len(), 33);
    }

    #[test]
    fn half_precision_conversions_round_trip() {
        for v in [
            0.0f32,
            1.0,
            -2.5,
            65504.0,
            0.000_061_035_156,
            5.960_464_5e-8,
            0.1,
        ] {
            let h = f32_to_f16(v);
            let back = f16_to_f32(h);
            assert!(
                (back - v).abs() <= v.abs() * 1e-3 + 1e-7,
                "{v} -> {h:#x} -> {back}"
            );
        }
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }
}
