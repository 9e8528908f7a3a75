//! The data of a scope's vars: views of memory the scope borrows, as raw
//! pointers (a var's data must own no borrow: the var outlives no scope,
//! but its type must be `'static`). `README.md` beside this file has the
//! argument that they never dangle.
//!
//! A view is a movable value that holds a pointer, so nothing outside this
//! crate ever holds one, owned or by reference: a guard of a scoped var
//! reaches the elements the view stands for ([`View::Target`]: `T`, `[T]`,
//! a [`Tile`]), none of them a value that could be swapped or moved into
//! another var.
//!
//! `unsafe` here because a view is a pointer the type system does not
//! track; the scope's end (every op and guard on the var gone before it
//! returns) is what keeps it valid, and a loom model
//! (`var/var_cell/loom_tests.rs`) checks that end over the real var gate.
//! Miri runs this file's tests and the scope's.

#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::ptr::NonNull;

/// What a scoped var holds: one of the views below. Its guards reach
/// [`Target`](View::Target), the borrowed elements, never the view itself.
/// Sealed.
pub trait View: sealed::Sealed + Send + Sync + 'static {
    /// What a guard of the var dereferences to: the borrowed value (`T`),
    /// the borrowed slice (`[T]`) or a [`Tile`]. None is a `Sized` value
    /// holding the pointer, so no safe code can swap or move a view out
    /// of its var.
    type Target: ?Sized;

    /// The elements, shared.
    #[doc(hidden)]
    fn target(&self) -> &Self::Target;

    /// The elements, exclusively.
    #[doc(hidden)]
    fn target_mut(&mut self) -> &mut Self::Target;
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for super::RefView<T> {}
    impl<T> Sealed for super::SliceView<T> {}
    impl<T> Sealed for super::TileView<T> {}
}

/// A scope's view of a value it borrows: the data of a scope's var made
/// by [`Scope::var`](crate::scope::Scope::var). Its guards reach the `T`.
pub struct RefView<T> {
    ptr: NonNull<T>,
    _owns: PhantomData<T>,
}

/// A scope's view of a slice it borrows: the data of a scope's var made by
/// [`Scope::slice`](crate::scope::Scope::slice) or
/// [`Scope::chunks`](crate::scope::Scope::chunks). Its guards reach the `[T]`.
pub struct SliceView<T> {
    ptr: NonNull<T>,
    len: usize,
    _owns: PhantomData<T>,
}

/// A scope's view of one tile of a row-major matrix it borrows: `rows`
/// rows of `cols` elements, each row `stride` elements after the one
/// before it. Made by [`Scope::tiles`](crate::scope::Scope::tiles). Its
/// guards reach the [`Tile`].
pub struct TileView<T> {
    ptr: NonNull<T>,
    rows: usize,
    cols: usize,
    stride: usize,
    _owns: PhantomData<T>,
}

// SAFETY: a view stands for the exclusive borrow the scope took (`&mut T`,
// `&mut [T]`, disjoint parts of one `&mut [T]`), which is `Send` when `T`
// is; the engine's gate hands the view to one thread at a time for writes.
unsafe impl<T: Send> Send for RefView<T> {}
// SAFETY: shared, a view gives only `&T`, as `&mut T` shared does; several
// readers at once need `T: Sync`.
unsafe impl<T: Sync> Sync for RefView<T> {}
// SAFETY: as for `RefView`.
unsafe impl<T: Send> Send for SliceView<T> {}
// SAFETY: as for `RefView`.
unsafe impl<T: Sync> Sync for SliceView<T> {}
// SAFETY: as for `RefView`; the tile's rows are part of the one borrow
// and of no other tile's (`Scope::tiles` cuts disjoint tiles).
unsafe impl<T: Send> Send for TileView<T> {}
// SAFETY: as for `RefView`.
unsafe impl<T: Sync> Sync for TileView<T> {}

impl<T> RefView<T> {
    /// # Safety
    ///
    /// `value` is valid, and reached by nothing else, for as long as the
    /// view may be dereferenced (the scope's argument).
    pub(super) unsafe fn new(value: &mut T) -> Self {
        Self { ptr: NonNull::from(value), _owns: PhantomData }
    }
}

impl<T> SliceView<T> {
    /// # Safety
    ///
    /// As for [`RefView::new`], for the whole slice.
    pub(super) unsafe fn new(data: &mut [T]) -> Self {
        let len = data.len();
        Self { ptr: NonNull::from(data).cast(), len, _owns: PhantomData }
    }
}

impl<T> TileView<T> {
    /// The tile of `rows` × `cols` elements starting at `start`, rows
    /// `stride` apart.
    ///
    /// # Safety
    ///
    /// As for [`RefView::new`], for the tile's elements: every `start +
    /// r * stride + c` (`r < rows`, `c < cols <= stride`) is in one live
    /// allocation, reached by nothing else but this view while it may be
    /// dereferenced. Other tiles of the same matrix may exist; the caller
    /// cuts them disjoint, from one raw pointer to the whole matrix.
    pub(super) unsafe fn new(start: NonNull<T>, rows: usize, cols: usize, stride: usize) -> Self {
        debug_assert!(cols <= stride);
        Self { ptr: start, rows, cols, stride, _owns: PhantomData }
    }
}

/// One tile of a matrix lent to a scope, as the guards of its var reach
/// it: `nrows()` rows of `ncols()` elements, each row a contiguous slice
/// ([`row`](Self::row), [`row_mut`](Self::row_mut)); an element is
/// `tile[(r, c)]`.
///
/// It is unsized, so that no safe code can move or swap it: only a
/// reference to it exists, borrowed from a guard.
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let mut m = vec![0u8; 4];
/// depengine::scope(&engine, |s| {
///     let t = s.tiles(&mut m, 2, 1, 2).unwrap();
///     engine.op("swap").write(&t[0][0]).write(&t[1][0]).run(|(), (mut a, mut b)| {
///         std::mem::swap(&mut *a, &mut *b); // error: `Tile<u8>` is not sized
///         Ok(())
///     });
/// })
/// .unwrap();
/// ```
#[repr(C)]
pub struct Tile<T> {
    view: TileView<T>,
    /// Makes the type unsized: a `&mut Tile` cannot be swapped.
    _unsized: [()],
}

impl<T> Tile<T> {
    /// How many rows the tile has. (Counts are `n…`, as in ndarray;
    /// [`rows`](Self::rows) and [`rows_mut`](Self::rows_mut) iterate.)
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m: Vec<u32> = (0..12).collect(); // 3 rows of 4
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 4, 2, 2)?;
    ///     let shape = engine.op("shape").read(&tiles[1][0]).run(|(t,), ()| Ok((t.nrows(), t.ncols())));
    ///     assert_eq!(shape.blocking_wait()?, (1, 2)); // the bottom edge
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn nrows(&self) -> usize {
        self.view.rows
    }

    /// How many elements each row has.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m: Vec<u32> = (0..12).collect(); // 3 rows of 4
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 4, 2, 2)?;
    ///     let cols = engine.op("cols").read(&tiles[0][1]).run(|(t,), ()| Ok(t.ncols()));
    ///     assert_eq!(cols.blocking_wait()?, 2);
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn ncols(&self) -> usize {
        self.view.cols
    }

    /// Row `r`, contiguous.
    ///
    /// # Panics
    ///
    /// `r` out of range.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m: Vec<u32> = (0..12).collect(); // 3 rows of 4
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 4, 2, 2)?;
    ///     let second = engine.op("row").read(&tiles[0][1]).run(|(t,), ()| Ok(t.row(1).to_vec()));
    ///     assert_eq!(second.blocking_wait()?, [6, 7]);
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn row(&self, r: usize) -> &[T] {
        assert!(r < self.view.rows, "row {r} of a tile of {} rows", self.view.rows);
        // SAFETY: row `r` is `cols` elements at `r * stride` from the start,
        // inside the tile (`new`'s contract), borrowed shared with `self`.
        unsafe {
            std::slice::from_raw_parts(self.view.ptr.as_ptr().add(r * self.view.stride), self.view.cols)
        }
    }

    /// Row `r`, contiguous, mutably.
    ///
    /// # Panics
    ///
    /// `r` out of range.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m: Vec<u32> = (0..12).collect(); // 3 rows of 4
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 4, 2, 2)?;
    ///     engine.op("zero").write(&tiles[0][0]).run(|(), (mut t,)| { t.row_mut(0).fill(0); Ok(()) });
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// assert_eq!(&m[..4], [0, 0, 2, 3]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn row_mut(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.view.rows, "row {r} of a tile of {} rows", self.view.rows);
        // SAFETY: as for `row`, borrowed exclusively with `self`.
        unsafe {
            std::slice::from_raw_parts_mut(self.view.ptr.as_ptr().add(r * self.view.stride), self.view.cols)
        }
    }

    /// The rows, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m: Vec<u32> = (0..12).collect(); // 3 rows of 4
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 4, 2, 2)?;
    ///     let sum = engine.op("sum").read(&tiles[0][0]).run(|(t,), ()| Ok(t.rows().flatten().sum::<u32>()));
    ///     assert_eq!(sum.blocking_wait()?, 0 + 1 + 4 + 5);
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn rows(&self) -> impl Iterator<Item = &[T]> + '_ {
        (0..self.view.rows).map(|r| self.row(r))
    }

    /// The rows, in order, mutably: disjoint slices, so that a kernel may
    /// hold several at once (collect them, and `split_at_mut` the list).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m: Vec<u32> = (0..12).collect(); // 3 rows of 4
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 4, 2, 2)?;
    ///     engine.op("neg").write(&tiles[1][1]).run(|(), (mut t,)| {
    ///         t.rows_mut().for_each(|r| r.iter_mut().for_each(|x| *x += 100));
    ///         Ok(())
    ///     });
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// assert_eq!(&m[10..], [110, 111]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn rows_mut(&mut self) -> impl Iterator<Item = &mut [T]> + '_ {
        let TileView { ptr, stride, cols, .. } = self.view;
        // SAFETY: row `r` is `cols <= stride` elements at `r * stride`,
        // inside the tile (`new`'s contract), so no two rows overlap; each
        // is borrowed for as long as `self` is, mutably.
        (0..self.view.rows)
            .map(move |r| unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr().add(r * stride), cols) })
    }
}

impl<T: Send + Sync + 'static> View for RefView<T> {
    type Target = T;

    fn target(&self) -> &T {
        // SAFETY: valid for the view's life (`new`'s contract), shared with
        // `self`.
        unsafe { self.ptr.as_ref() }
    }

    fn target_mut(&mut self) -> &mut T {
        // SAFETY: as for `target`, exclusive with `self`.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: Send + Sync + 'static> View for SliceView<T> {
    type Target = [T];

    fn target(&self) -> &[T] {
        // SAFETY: `len` valid elements at `ptr` for the view's life.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn target_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `target`, exclusive with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Send + Sync + 'static> View for TileView<T> {
    type Target = Tile<T>;

    fn target(&self) -> &Tile<T> {
        let tile = std::ptr::slice_from_raw_parts(std::ptr::from_ref(self).cast::<()>(), 0) as *const Tile<T>;
        // SAFETY: `Tile` is `repr(C)`: this view at offset 0, then a tail of
        // no bytes, so a `Tile` with an empty tail is exactly the view's
        // bytes, and the pointer comes from a shared borrow of the view
        // that the result keeps.
        unsafe { &*tile }
    }

    fn target_mut(&mut self) -> &mut Tile<T> {
        let tile =
            std::ptr::slice_from_raw_parts_mut(std::ptr::from_mut(self).cast::<()>(), 0) as *mut Tile<T>;
        // SAFETY: as for `target`, from an exclusive borrow.
        unsafe { &mut *tile }
    }
}

impl<T> Index<(usize, usize)> for Tile<T> {
    type Output = T;

    fn index(&self, (r, c): (usize, usize)) -> &T {
        &self.row(r)[c]
    }
}

impl<T> IndexMut<(usize, usize)> for Tile<T> {
    fn index_mut(&mut self, (r, c): (usize, usize)) -> &mut T {
        &mut self.row_mut(r)[c]
    }
}

impl<T> fmt::Debug for RefView<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RefView")
    }
}

impl<T> fmt::Debug for SliceView<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SliceView(len {})", self.len)
    }
}

impl<T> fmt::Debug for TileView<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TileView({} x {}, stride {})", self.rows, self.cols, self.stride)
    }
}

impl<T> fmt::Debug for Tile<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tile({} x {})", self.view.rows, self.view.cols)
    }
}

#[cfg(test)]
mod tests;
