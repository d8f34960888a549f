//! A matcher's regular expression, compiled once and kept small (issue #41).
//!
//! The `regex` crate builds a lazy DFA, a reverse NFA, a one-pass DFA and
//! literal prefilters beside each expression: a 1 KiB list of host names took
//! 50 KiB, `\w{40}` 2.6 MiB, so 64 such matchers in one request could take
//! gigabytes. Here an expression that matches strings of a few fixed shapes
//! (an alternation of words, host names with unescaped dots, `[0-9]{2}`: the
//! usual big matcher) is kept as those shapes, about as large as its text;
//! any other is one Thompson NFA, refused past [`MAX_COMPILED`] bytes and
//! searched by the PikeVM with a cache made per search (label values are
//! short), so nothing grows after it is built.

use std::sync::Arc;

use regex_automata::nfa::thompson::pikevm::PikeVM;
use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_automata::{Anchored, Input};
use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// The most memory one compiled expression may take; a silence's matchers
/// together get half of it ([`super::silence::MAX_SILENCE_COMPILED`]).
pub const MAX_COMPILED: usize = 256 * 1024;

/// An expression of fixed shapes may have this many; more is an NFA.
const MAX_SHAPES: usize = 4096;
/// `x{n,m}` with `m` at most this is spelled out into shapes.
const MAX_REPEAT: u32 = 8;

/// A compiled, fully anchored regular expression; clones share it.
#[derive(Clone)]
pub struct Pattern(Arc<Kind>);

enum Kind {
    /// Alternatives each matching strings of one fixed shape.
    Shapes(Shapes),
    /// Anything else.
    Nfa(PikeVM),
}

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// Not a regular expression; the reason in one line.
    Invalid(String),
    /// It would take more than the limit it was given.
    TooLarge,
}

impl Pattern {
    /// Compiles `^(?:body)$` with the `regex` crate's syntax, within
    /// [`MAX_COMPILED`]; the error is one line.
    pub fn new(body: &str) -> Result<Pattern, String> {
        Pattern::within(body, MAX_COMPILED).map_err(|e| match e {
            PatternError::Invalid(why) => why,
            PatternError::TooLarge => format!(
                "compiles to more than {} KiB; write a smaller expression \
                 (a list of words is cheap, repeated Unicode classes such as \\w{{40}} are not)",
                MAX_COMPILED / 1024
            ),
        })
    }

    /// Compiles `^(?:body)$`, refusing it once it would keep more than
    /// `limit` bytes (compiling stops there).
    pub fn within(body: &str, limit: usize) -> Result<Pattern, PatternError> {
        let anchored = format!("^(?:{body})$");
        let hir = regex_syntax::Parser::new()
            .parse(&anchored)
            .map_err(|e| PatternError::Invalid(last_line(&e.to_string())))?;
        if let Some(shapes) = Shapes::of(&hir, limit) {
            return Ok(Pattern(Arc::new(Kind::Shapes(shapes))));
        }
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .which_captures(WhichCaptures::Implicit)
                    .nfa_size_limit(Some(limit)),
            )
            .build_from_hir(&hir)
            .map_err(|e| match e.size_limit() {
                Some(_) => PatternError::TooLarge,
                None => PatternError::Invalid(last_line(&e.to_string())),
            })?;
        if nfa.memory_usage() > limit {
            return Err(PatternError::TooLarge);
        }
        let vm = PikeVM::new_from_nfa(nfa)
            .map_err(|e| PatternError::Invalid(last_line(&e.to_string())))?;
        Ok(Pattern(Arc::new(Kind::Nfa(vm))))
    }

    /// Whether the whole of `value` matches.
    pub fn is_match(&self, value: &str) -> bool {
        match &*self.0 {
            Kind::Shapes(shapes) => shapes.is_match(value),
            Kind::Nfa(vm) => {
                let mut cache = vm.create_cache();
                vm.is_match(&mut cache, Input::new(value).anchored(Anchored::Yes))
            }
        }
    }

    /// The bytes it keeps (what [`MAX_COMPILED`] bounds).
    pub fn memory(&self) -> usize {
        match &*self.0 {
            Kind::Shapes(shapes) => shapes.memory(),
            Kind::Nfa(vm) => vm.get_nfa().memory_usage(),
        }
    }
}

/// One character class: a character (or, under `(?-u)`, a byte) in ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Set {
    Chars(Box<[(char, char)]>),
    Bytes(Box<[(u8, u8)]>),
}

impl Set {
    /// The length of the character at the start of `rest` when the class
    /// holds it.
    fn step(&self, rest: &str) -> Option<usize> {
        match self {
            Set::Chars(ranges) => {
                let c = rest.chars().next()?;
                in_ranges(ranges, c).then(|| c.len_utf8())
            }
            Set::Bytes(ranges) => {
                let b = *rest.as_bytes().first()?;
                in_ranges(ranges, b).then_some(1)
            }
        }
    }
}

fn in_ranges<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    ranges
        .binary_search_by(|(lo, hi)| {
            if *hi < x {
                std::cmp::Ordering::Less
            } else if *lo > x {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// A step of a shape while it is being built.
#[derive(Debug, Clone)]
enum Item {
    Lit(Vec<u8>),
    /// An index into the classes.
    Class(u16),
}

/// Alternatives of fixed shapes, as compact code: per shape, its steps
/// (`LIT` with the length and the bytes, or `CLASS` with its index; numbers
/// as LEB128), then `END`.
struct Shapes {
    code: Box<[u8]>,
    classes: Box<[Set]>,
}

const LIT: u8 = 0;
const CLASS: u8 = 1;
const END: u8 = 2;

impl Shapes {
    /// The shapes `^(?:…)$` matches, when there are few: `None` for an
    /// unbounded repetition or an assertion inside.
    fn of(hir: &Hir, limit: usize) -> Option<Shapes> {
        let HirKind::Concat(parts) = hir.kind() else {
            return None;
        };
        let (first, rest) = parts.split_first()?;
        let (last, middle) = rest.split_last()?;
        if first.kind() != &HirKind::Look(Look::Start) || last.kind() != &HirKind::Look(Look::End) {
            return None;
        }
        let mut classes = Vec::new();
        let shapes = concat(middle, &mut classes)?;
        let mut code = Vec::new();
        for shape in shapes {
            for item in shape {
                match item {
                    Item::Lit(bytes) => {
                        code.push(LIT);
                        leb128(&mut code, bytes.len());
                        code.extend_from_slice(&bytes);
                    }
                    Item::Class(i) => {
                        code.push(CLASS);
                        leb128(&mut code, usize::from(i));
                    }
                }
            }
            code.push(END);
            if code.len() > limit {
                return None;
            }
        }
        let shapes = Shapes {
            code: code.into_boxed_slice(),
            classes: classes.into_boxed_slice(),
        };
        (shapes.memory() <= limit).then_some(shapes)
    }

    fn is_match(&self, value: &str) -> bool {
        let code = &*self.code;
        let mut pc = 0;
        while pc < code.len() {
            // One shape: read to its END even once it failed.
            let mut at = Some(0usize);
            loop {
                let op = code[pc];
                pc += 1;
                match op {
                    LIT => {
                        let len = read_leb128(code, &mut pc);
                        let lit = &code[pc..pc + len];
                        pc += len;
                        at = at
                            .filter(|a| value.as_bytes()[*a..].starts_with(lit))
                            .map(|a| a + len);
                    }
                    CLASS => {
                        let i = read_leb128(code, &mut pc);
                        at = at.and_then(|a| {
                            let rest = value.get(a..)?;
                            Some(a + self.classes[i].step(rest)?)
                        });
                    }
                    _ => break,
                }
            }
            if at == Some(value.len()) {
                return true;
            }
        }
        false
    }

    fn memory(&self) -> usize {
        let classes: usize = self
            .classes
            .iter()
            .map(|c| match c {
                Set::Chars(r) => std::mem::size_of_val(&**r),
                Set::Bytes(r) => std::mem::size_of_val(&**r),
            })
            .sum();
        self.code.len() + classes + std::mem::size_of_val(&*self.classes)
    }
}

fn leb128(code: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        code.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    code.push(n as u8);
}

fn read_leb128(code: &[u8], pc: &mut usize) -> usize {
    let (mut n, mut shift) = (0usize, 0);
    loop {
        let b = code[*pc];
        *pc += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b < 0x80 {
            return n;
        }
        shift += 7;
    }
}

fn shapes(hir: &Hir, classes: &mut Vec<Set>) -> Option<Vec<Vec<Item>>> {
    match hir.kind() {
        HirKind::Empty => Some(vec![Vec::new()]),
        HirKind::Literal(l) => Some(vec![vec![Item::Lit(l.0.to_vec())]]),
        HirKind::Class(c) => {
            let set = match c {
                Class::Unicode(c) => {
                    Set::Chars(c.ranges().iter().map(|r| (r.start(), r.end())).collect())
                }
                Class::Bytes(c) => {
                    Set::Bytes(c.ranges().iter().map(|r| (r.start(), r.end())).collect())
                }
            };
            let i = match classes.iter().position(|s| *s == set) {
                Some(i) => i,
                None => {
                    classes.push(set);
                    classes.len() - 1
                }
            };
            Some(vec![vec![Item::Class(u16::try_from(i).ok()?)]])
        }
        HirKind::Capture(c) => shapes(&c.sub, classes),
        HirKind::Concat(parts) => concat(parts, classes),
        HirKind::Alternation(alts) => {
            let mut out = Vec::new();
            for a in alts {
                out.extend(shapes(a, classes)?);
                if out.len() > MAX_SHAPES {
                    return None;
                }
            }
            Some(out)
        }
        HirKind::Repetition(r) => {
            let max = r.max.filter(|m| *m <= MAX_REPEAT)?;
            let sub = shapes(&r.sub, classes)?;
            let mut out = Vec::new();
            let mut power = vec![Vec::new()];
            for n in 0..=max {
                if n >= r.min {
                    out.extend(power.iter().cloned());
                }
                if n < max {
                    power = product(&power, &sub)?;
                }
                if out.len() > MAX_SHAPES {
                    return None;
                }
            }
            Some(out)
        }
        HirKind::Look(_) => None,
    }
}

fn concat(parts: &[Hir], classes: &mut Vec<Set>) -> Option<Vec<Vec<Item>>> {
    let mut out = vec![Vec::new()];
    for p in parts {
        out = product(&out, &shapes(p, classes)?)?;
    }
    Some(out)
}

/// Every `a` followed by every `b` (adjacent literals joined), unless that
/// makes too many.
fn product(a: &[Vec<Item>], b: &[Vec<Item>]) -> Option<Vec<Vec<Item>>> {
    if a.len().saturating_mul(b.len()) > MAX_SHAPES {
        return None;
    }
    let mut out = Vec::with_capacity(a.len() * b.len());
    let mut bytes = 0usize;
    for x in a {
        for y in b {
            let mut shape = x.clone();
            for item in y {
                match (shape.last_mut(), item) {
                    (Some(Item::Lit(prev)), Item::Lit(next)) => prev.extend_from_slice(next),
                    _ => shape.push(item.clone()),
                }
            }
            bytes += shape
                .iter()
                .map(|i| match i {
                    Item::Lit(l) => 4 + l.len(),
                    Item::Class(_) => 4,
                })
                .sum::<usize>();
            if bytes > MAX_COMPILED {
                return None;
            }
            out.push(shape);
        }
    }
    Some(out)
}

/// Regex errors span several lines with a caret diagram; keep the last line,
/// which names the problem.
fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(body: &str) -> Pattern {
        Pattern::new(body).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    fn is_words(p: &Pattern) -> bool {
        matches!(&*p.0, Kind::Shapes(_))
    }

    #[test]
    fn fixed_shapes_are_kept_as_shapes() {
        for body in [
            "page|ticket",
            "",
            "host-(0[1-9]|1[0-2])\\.example\\.com",
            "(?i)hello",
            "https?",
            "a{2,3}",
            "x|",
            "a.b",
            "[0-9]{2}-\\d",
            "(?i)é.",
        ] {
            assert!(is_words(&p(body)), "{body}");
        }
        // 40 host names, their dots unescaped as people write them.
        let hosts: Vec<String> = (0..40)
            .map(|i| format!("host-{i:03}.prod.example.com"))
            .collect();
        let text = hosts.join("|");
        let list = p(&text);
        assert!(is_words(&list));
        assert!(list.memory() < 2 * text.len(), "{}", list.memory());
        assert!(list.is_match("host-017.prod.example.com"));
        assert!(list.is_match("host-017éprodxexample-com"));
        assert!(!list.is_match("host-017.prod.example.co"));
        assert!(!list.is_match("xhost-017.prod.example.com"));
        assert!(!list.is_match("host-017.prod.example.comx"));
        let any = p("a.b");
        assert!(any.is_match("aéb") && !any.is_match("a\nb") && !any.is_match("ab"));
    }

    #[test]
    fn anything_else_is_an_nfa() {
        for body in [".*", "\\w+", "a\\bb", "[a-z]+", "a)|(b", "(?m)^x$"] {
            assert!(!is_words(&p(body)), "{body}");
        }
        assert!(!p("a\\bb").is_match("ab"), "an assertion is not a word");
        // `^(?:a)|(b)$`: the anchors bind to each side, as in Alertmanager.
        let odd = p("a)|(b");
        assert!(odd.is_match("a") && odd.is_match("b"));
    }

    #[test]
    fn an_expression_compiling_too_large_is_refused() {
        let e = Pattern::new("\\w{40}").err().unwrap();
        assert!(e.starts_with("compiles to more than 256 KiB"), "{e}");
        assert!(p("\\w{3}").memory() <= MAX_COMPILED);
        assert_eq!(
            Pattern::within("\\w+", 1024).err(),
            Some(PatternError::TooLarge)
        );
        assert_eq!(
            Pattern::within("ab|cd", 8).err(),
            Some(PatternError::TooLarge),
            "the word list too"
        );
        let e = Pattern::new("(").err().unwrap();
        assert!(!e.contains('\n') && e.contains("unclosed group"), "{e}");
    }

    proptest! {
        /// Both forms answer as the `regex` crate does.
        #[test]
        fn agrees_with_the_regex_crate(
            body in r"(\(?[abc.|]{0,4}[?*]?\)?|\[ab\]|\\d|x\{1,2\}){0,4}",
            value in "[abcx1]{0,5}",
        ) {
            let Ok(want) = regex::Regex::new(&format!("^(?:{body})$")) else {
                prop_assert!(Pattern::new(&body).is_err());
                return Ok(());
            };
            prop_assert_eq!(p(&body).is_match(&value), want.is_match(&value), "{}", body);
        }
    }
}
