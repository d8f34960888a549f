//! `depends_on` (SPEC §6.2): the graph of which checks' alerts wait for
//! which, over slugs. Pure: the API and the config file hand it the checks
//! they know of, and it finds what must be refused, slugs no check has and
//! cycles (a check held while one it depends on is down, that one held
//! while the first is down, would never be announced).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;

/// The most slugs one check may depend on.
pub const MAX_DEPENDS_ON: usize = 64;

/// Why a check's `depends_on` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependsError {
    /// A slug no check has.
    Unknown(String),
    /// A cycle, as the slugs along it with the first repeated at the end:
    /// `["a", "b", "a"]` for a → b → a.
    Cycle(Vec<String>),
}

impl fmt::Display for DependsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DependsError::Unknown(slug) => write!(f, "{slug:?} is not the slug of any check"),
            DependsError::Cycle(path) => {
                write!(f, "makes a cycle: {}", path.join(" → "))
            }
        }
    }
}

/// Every check that has a slug, with the slugs it depends on. A check
/// without a slug cannot be depended on, so it cannot be on a cycle either:
/// only its own `depends_on` needs checking ([`Graph::problems`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    deps: BTreeMap<String, Vec<String>>,
}

impl Graph {
    /// The graph of these `(slug, depends_on)` pairs.
    pub fn new(checks: impl IntoIterator<Item = (String, Vec<String>)>) -> Graph {
        Graph {
            deps: checks.into_iter().collect(),
        }
    }

    /// Adds a check, or replaces what the check with this slug depends on.
    pub fn set(&mut self, slug: &str, depends_on: &[String]) {
        self.deps.insert(slug.to_string(), depends_on.to_vec());
    }

    /// Takes a check out (it was deleted, or renamed).
    pub fn remove(&mut self, slug: &str) {
        self.deps.remove(slug);
    }

    /// True when a check has this slug.
    pub fn contains(&self, slug: &str) -> bool {
        self.deps.contains_key(slug)
    }

    /// What is wrong with one check's `depends_on` in this graph, which
    /// already holds the check as it will be (see [`Graph::set`]): the slugs
    /// no check has, and the shortest cycle through the check. Cycles that
    /// do not pass through it are not its problem (they were refused when
    /// they were made, or were made by a race between replicas; a change
    /// elsewhere must not be refused because of them).
    pub fn problems(&self, slug: Option<&str>, depends_on: &[String]) -> Vec<DependsError> {
        let mut out: Vec<DependsError> = depends_on
            .iter()
            .filter(|d| !self.contains(d))
            .map(|d| DependsError::Unknown(d.clone()))
            .collect();
        if let Some(cycle) = slug.and_then(|s| self.cycle_through(s, None)) {
            out.push(DependsError::Cycle(cycle));
        }
        out
    }

    /// One shortest cycle through `start` (first and last element `start`),
    /// moving only through `within` when given. Breadth-first, so linear in
    /// the size of the graph.
    pub fn cycle_through(
        &self,
        start: &str,
        within: Option<&HashSet<&str>>,
    ) -> Option<Vec<String>> {
        let mut parent: HashMap<&str, &str> = HashMap::new();
        let mut queue: VecDeque<&str> = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for w in self.deps.get(v).into_iter().flatten() {
                let w = w.as_str();
                if w == start {
                    let mut back = Vec::new();
                    let mut at = v;
                    while at != start {
                        back.push(at.to_string());
                        at = parent.get(at).copied().unwrap_or(start);
                    }
                    let mut path = vec![start.to_string()];
                    path.extend(back.into_iter().rev());
                    path.push(start.to_string());
                    return Some(path);
                }
                let inside = within.is_none_or(|set| set.contains(w));
                if inside && self.contains(w) && !parent.contains_key(w) {
                    parent.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        None
    }

    /// Every cycle, one per strongly connected set of checks (the shortest
    /// through its first slug), ordered by that slug: what a whole config
    /// file is refused for.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        self.cycles_where(|_| true)
    }

    /// The cycles through any of `slugs`, one per strongly connected set of
    /// checks (the shortest through the first of `slugs` in it): what a
    /// reload that writes these checks is refused for, while a cycle among
    /// other checks is not its business.
    pub fn cycles_through_any(&self, slugs: &HashSet<&str>) -> Vec<Vec<String>> {
        self.cycles_where(|s| slugs.contains(s))
    }

    fn cycles_where(&self, wanted: impl Fn(&str) -> bool) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = self
            .components()
            .into_iter()
            .filter_map(|comp| {
                let first = comp.iter().copied().filter(|s| wanted(s)).min()?;
                let set: HashSet<&str> = comp.iter().copied().collect();
                self.cycle_through(first, Some(&set))
            })
            .collect();
        out.sort();
        out
    }

    /// The strongly connected components (Tarjan's algorithm, iterative so
    /// a long chain cannot overflow the stack), over known slugs only.
    fn components(&self) -> Vec<Vec<&str>> {
        let names: Vec<&str> = self.deps.keys().map(String::as_str).collect();
        let index_of: HashMap<&str, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let adj: Vec<Vec<usize>> = self
            .deps
            .values()
            .map(|ds| {
                ds.iter()
                    .filter_map(|d| index_of.get(d.as_str()).copied())
                    .collect()
            })
            .collect();
        const UNSEEN: usize = usize::MAX;
        let n = names.len();
        let mut index = vec![UNSEEN; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack: Vec<usize> = Vec::new();
        let mut next = 0;
        let mut out = Vec::new();
        for root in 0..n {
            if index[root] != UNSEEN {
                continue;
            }
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            // (node, position of the next edge to follow)
            let mut calls: Vec<(usize, usize)> = vec![(root, 0)];
            while let Some(top) = calls.last_mut() {
                let (v, edge) = *top;
                if let Some(&w) = adj[v].get(edge) {
                    top.1 += 1;
                    if index[w] == UNSEEN {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                calls.pop();
                if let Some(&(u, _)) = calls.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    let cyclic = comp.len() > 1 || adj[v].contains(&v);
                    if cyclic {
                        out.push(comp.into_iter().map(|i| names[i]).collect());
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn graph(edges: &[(&str, &[&str])]) -> Graph {
        Graph::new(edges.iter().map(|(s, ds)| {
            (
                s.to_string(),
                ds.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            )
        }))
    }

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn no_problem_in_a_tree() {
        let g = graph(&[("app", &["db", "dns"]), ("db", &["dns"]), ("dns", &[])]);
        assert!(g.problems(Some("app"), &strings(&["db", "dns"])).is_empty());
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn unknown_slugs_are_named() {
        let g = graph(&[("app", &["db", "nope"]), ("db", &[])]);
        assert_eq!(
            g.problems(Some("app"), &strings(&["db", "nope"])),
            [DependsError::Unknown("nope".into())]
        );
        // A check without a slug is checked the same way.
        assert_eq!(
            g.problems(None, &strings(&["gone"])),
            [DependsError::Unknown("gone".into())]
        );
        assert_eq!(
            DependsError::Unknown("nope".into()).to_string(),
            "\"nope\" is not the slug of any check"
        );
    }

    #[test]
    fn two_and_three_step_cycles_are_found_through_the_check() {
        let g = graph(&[("a", &["b"]), ("b", &["a"])]);
        assert_eq!(
            g.problems(Some("a"), &strings(&["b"])),
            [DependsError::Cycle(strings(&["a", "b", "a"]))]
        );
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
        assert_eq!(
            g.cycle_through("b", None),
            Some(strings(&["b", "c", "a", "b"]))
        );
        assert_eq!(
            DependsError::Cycle(strings(&["a", "b", "c", "a"])).to_string(),
            "makes a cycle: a → b → c → a"
        );
        assert_eq!(g.cycles(), [strings(&["a", "b", "c", "a"])]);
    }

    #[test]
    fn the_shortest_cycle_is_reported() {
        // a → b → c → d → a and a → d → a: the short one names fewer checks.
        let g = graph(&[
            ("a", &["b", "d"]),
            ("b", &["c"]),
            ("c", &["d"]),
            ("d", &["a"]),
        ]);
        assert_eq!(g.cycle_through("a", None), Some(strings(&["a", "d", "a"])));
    }

    #[test]
    fn a_self_loop_is_a_cycle() {
        let g = graph(&[("a", &["a"])]);
        assert_eq!(g.cycle_through("a", None), Some(strings(&["a", "a"])));
        assert_eq!(g.cycles(), [strings(&["a", "a"])]);
    }

    #[test]
    fn a_cycle_elsewhere_is_not_this_checks_problem() {
        let g = graph(&[("a", &["b"]), ("b", &["a"]), ("x", &["a"])]);
        assert!(g.problems(Some("x"), &strings(&["a"])).is_empty());
        // But the whole graph has it.
        assert_eq!(g.cycles(), [strings(&["a", "b", "a"])]);
    }

    #[test]
    fn cycles_through_any_leaves_other_cycles_alone() {
        let g = graph(&[
            ("a", &["b"]),
            ("b", &["a"]),
            ("x", &["y"]),
            ("y", &["z"]),
            ("z", &["x"]),
        ]);
        let only = |slugs: &[&str]| g.cycles_through_any(&slugs.iter().copied().collect());
        assert_eq!(only(&["y"]), [strings(&["y", "z", "x", "y"])]);
        assert_eq!(only(&["b", "free"]), [strings(&["b", "a", "b"])]);
        assert!(only(&["free"]).is_empty());
    }

    #[test]
    fn dangling_slugs_lead_nowhere() {
        // "gone" was deleted after "a" named it: no cycle, no panic.
        let g = graph(&[("a", &["gone"]), ("b", &["a"])]);
        assert!(g.cycles().is_empty());
        assert!(g.problems(Some("b"), &strings(&["a"])).is_empty());
    }

    #[test]
    fn renaming_into_a_dangling_slug_can_close_a_cycle() {
        let mut g = graph(&[("a", &["b2"]), ("b", &["a"])]);
        g.remove("b");
        g.set("b2", &strings(&["a"]));
        assert_eq!(
            g.problems(Some("b2"), &strings(&["a"])),
            [DependsError::Cycle(strings(&["b2", "a", "b2"]))]
        );
    }

    #[test]
    fn one_cycle_per_component_ordered() {
        let g = graph(&[
            ("z", &["y"]),
            ("y", &["z"]),
            ("a", &["b"]),
            ("b", &["c"]),
            ("c", &["a", "b"]),
            ("free", &["a"]),
        ]);
        assert_eq!(
            g.cycles(),
            [strings(&["a", "b", "c", "a"]), strings(&["y", "z", "y"])]
        );
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 200_000;
        let mut g = Graph::new((0..n).map(|i| (format!("c{i}"), vec![format!("c{}", i + 1)])));
        assert!(g.cycles().is_empty());
        g.set(&format!("c{n}"), &strings(&["c0"]));
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].len(), n + 2);
    }

    /// Naive: can `from` reach `to` in one or more steps?
    fn reaches(edges: &BTreeMap<String, Vec<String>>, from: &str, to: &str) -> bool {
        let mut seen = HashSet::new();
        let mut todo: Vec<&str> = edges
            .get(from)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        while let Some(v) = todo.pop() {
            if v == to {
                return true;
            }
            if seen.insert(v) {
                todo.extend(edges.get(v).into_iter().flatten().map(String::as_str));
            }
        }
        false
    }

    fn is_cycle(edges: &BTreeMap<String, Vec<String>>, path: &[String]) -> bool {
        path.len() >= 2
            && path.first() == path.last()
            && path
                .windows(2)
                .all(|w| edges.get(&w[0]).is_some_and(|ds| ds.contains(&w[1])))
    }

    fn arb_graph() -> impl Strategy<Value = BTreeMap<String, Vec<String>>> {
        // Slugs from a small set, some of them never declared (dangling).
        let slug = (0u8..10).prop_map(|i| format!("s{i}"));
        proptest::collection::btree_map(
            (0u8..8).prop_map(|i| format!("s{i}")),
            proptest::collection::vec(slug, 0..4),
            0..8,
        )
    }

    proptest! {
        #[test]
        fn cycle_through_agrees_with_reachability(edges in arb_graph()) {
            let g = Graph::new(edges.clone());
            for s in edges.keys() {
                let got = g.cycle_through(s, None);
                prop_assert_eq!(got.is_some(), reaches(&edges, s, s), "{}", s);
                if let Some(path) = got {
                    prop_assert!(is_cycle(&edges, &path), "{:?}", path);
                    prop_assert_eq!(&path[0], s);
                    // Shortest: no check twice but the ends.
                    let inner: HashSet<&String> = path[..path.len() - 1].iter().collect();
                    prop_assert_eq!(inner.len(), path.len() - 1);
                }
            }
        }

        #[test]
        fn cycles_has_one_per_class_of_mutually_reachable_checks(edges in arb_graph()) {
            let g = Graph::new(edges.clone());
            let on_cycle: Vec<&String> = edges.keys().filter(|s| reaches(&edges, s, s)).collect();
            let mut classes: Vec<Vec<&String>> = Vec::new();
            for s in &on_cycle {
                match classes.iter_mut().find(|c| reaches(&edges, c[0], s) && reaches(&edges, s, c[0])) {
                    Some(c) => c.push(s),
                    None => classes.push(vec![s]),
                }
            }
            let cycles = g.cycles();
            prop_assert_eq!(cycles.len(), classes.len());
            for c in &cycles {
                prop_assert!(is_cycle(&edges, c), "{:?}", c);
            }
            prop_assert_eq!(cycles.is_empty(), on_cycle.is_empty());
        }
    }
}
