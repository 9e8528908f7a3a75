use super::*;
use crate::Engine;

fn decl(var: &crate::Var<u32>, write: bool, typed: bool) -> Decl {
    Decl { var: var.any(), access: if write { Access::Write } else { Access::Read }, typed }
}

fn shape(list: &DepList) -> Vec<(u64, bool)> {
    list.iter().map(|d| (d.var.id(), d.access == Access::Write)).collect()
}

#[test]
fn four_fit_inline_in_40_bytes() {
    assert_eq!(std::mem::size_of::<DepList>(), 40);
    assert_eq!(std::mem::size_of::<Option<DepList>>(), 40, "the heap variant has no tag of its own");
}

#[test]
fn declarations_keep_their_order_accesses_and_kinds_inline_and_spilled() {
    let engine = Engine::new();
    let vars: Vec<_> = (0..7).map(|i| engine.var(i)).collect();
    let mut list = DepList::new();
    assert!(list.is_empty() && list.first().is_none());
    let mut want = Vec::new();
    for (i, v) in vars.iter().enumerate() {
        list.push(decl(v, i % 2 == 1, i % 3 == 0));
        want.push((v.id(), i % 2 == 1));
        assert_eq!(list.len(), i + 1);
        assert_eq!(shape(&list), want, "after {} pushes", i + 1);
        assert!(matches!(list.0, Repr::Heap(_)) == (i >= INLINE));
    }
    assert_eq!(list.iter().len(), 7);
    assert!(list.get(7).is_none());
    let owned = list.into_vec();
    let kinds: Vec<_> = owned.iter().map(|d| (d.access == Access::Write, d.typed)).collect();
    assert_eq!(kinds, (0..7).map(|i| (i % 2 == 1, i % 3 == 0)).collect::<Vec<_>>());
    let back = DepList::from_vec(owned[..3].to_vec());
    assert!(matches!(back.0, Repr::Inline { .. }));
    assert_eq!(shape(&back), want[..3]);
    let typed: Vec<_> = back.into_vec().iter().map(|d| d.typed).collect();
    assert_eq!(typed, [true, false, false]);
}

/// Counts the drops of a var's data.
struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_list_keeps_its_vars_alive_until_it_goes_inline_and_spilled() {
    for n in [1, 4, 6] {
        let engine = Engine::new();
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let v = engine.var(Counted(drops.clone()));
        let mut list = DepList::new();
        for _ in 0..n {
            list.push(Decl { var: v.any(), access: Access::Read, typed: false });
        }
        drop(v);
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 0, "{n} declarations hold the var");
        drop(list);
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 1, "{n} declarations let it go");
    }
}

#[test]
fn sorting_moves_each_access_and_kind_with_its_var_inline_and_spilled() {
    let engine = Engine::new();
    let vars: Vec<_> = (0..6).map(|i| engine.var(i)).collect();
    for n in [2, 4, 6] {
        // Pushed in reverse id order; var k is a write if k is even, typed
        // if k is a multiple of 3.
        let mut list = DepList::new();
        for (k, v) in vars[..n].iter().enumerate().rev() {
            list.push(decl(v, k % 2 == 0, k % 3 == 0));
        }
        assert!(!list.any_repeated());
        list.sort_by_var_id();
        let want: Vec<_> = vars[..n].iter().enumerate().map(|(k, v)| (v.id(), k % 2 == 0)).collect();
        assert_eq!(shape(&list), want, "{n} vars");
        let typed: Vec<_> = list.into_vec().iter().map(|d| d.typed).collect();
        assert_eq!(typed, (0..n).map(|k| k % 3 == 0).collect::<Vec<_>>(), "{n} vars");
    }
    let mut twice = DepList::new();
    for v in [&vars[1], &vars[0], &vars[1]] {
        twice.push(decl(v, false, false));
    }
    twice.sort_by_var_id();
    assert!(twice.any_repeated());
}
