//! A function of the named (debug) engine found in an engine without names, by its code's shape.
//!
//! The engines link the same SpiderMonkey, built once; what differs is how it was linked (the
//! release engine inlines more: about 12,600 functions against 19,900) and where the linker
//! placed data. So a function keeps its sequence of loads and stores, offsets and all, but for
//! its fixed addresses, unless other code was inlined into it. A counterpart is, among the
//! functions of the same type:
//! 1. the one function of the same shape ([`super::code::Reading::shape`]: its loads' and
//!    stores' operators and offsets, in order); else
//! 2. the one function whose accesses, counted as a multiset of (operator, offset), overlap
//!    the named one's by at least [`NEAR`] (intersection over union), ahead of the next by at
//!    least [`MARGIN`] (code scheduled differently, or a little inlined).
//!
//! Anything else (several functions of the same shape, or none near enough) is no counterpart:
//! the rules that read such a function are not checked in that engine, and are counted so.

use std::collections::HashMap;

use anyhow::Result;
use wasmparser::ValType;

use super::code::Engine;

/// The least overlap of a near counterpart.
pub const NEAR: f64 = 0.7;
/// How far ahead of the next function a near counterpart's overlap must be.
pub const MARGIN: f64 = 0.1;

type Shape = Vec<(&'static str, u64)>;
type Bag = HashMap<(&'static str, u64), u32>;
type Signature = (Vec<ValType>, Vec<ValType>);

/// How a function of the named engine was found in another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Found {
    /// The one function of the same exact shape.
    Exact(u32),
    /// The one function near enough: its overlap.
    Near(u32, f64),
    /// No function, or several: how many had the same shape.
    None { same_shape: usize },
}

impl Found {
    pub fn func(&self) -> Option<u32> {
        match *self {
            Found::Exact(f) | Found::Near(f, _) => Some(f),
            Found::None { .. } => None,
        }
    }
}

/// An engine's functions by type, with their shapes, to look counterparts up in.
pub struct Counterparts {
    by_type: HashMap<Signature, Vec<(u32, Bag)>>,
    by_shape: HashMap<(Signature, Shape), Vec<u32>>,
}

fn bag(shape: &[(&'static str, u64)]) -> Bag {
    let mut bag = Bag::new();
    for access in shape {
        *bag.entry(*access).or_default() += 1;
    }
    bag
}

fn overlap(a: &Bag, b: &Bag) -> f64 {
    let (mut both, mut either) = (0, 0);
    for (k, &x) in a {
        let y = b.get(k).copied().unwrap_or(0);
        both += x.min(y);
        either += x.max(y);
    }
    either += b
        .iter()
        .filter(|(k, _)| !a.contains_key(*k))
        .map(|(_, y)| y)
        .sum::<u32>();
    if either == 0 {
        1.0
    } else {
        f64::from(both) / f64::from(either)
    }
}

impl Counterparts {
    pub fn new(engine: &Engine<'_>) -> Result<Self> {
        let mut by_type: HashMap<_, Vec<_>> = HashMap::new();
        let mut by_shape: HashMap<_, Vec<_>> = HashMap::new();
        for func in engine.defined() {
            let shape = engine.read(func)?.shape();
            let signature = engine.signature(func);
            by_type
                .entry(signature.clone())
                .or_default()
                .push((func, bag(&shape)));
            by_shape.entry((signature, shape)).or_default().push(func);
        }
        Ok(Counterparts { by_type, by_shape })
    }

    /// The counterpart of function `func` of the named engine `named`.
    pub fn find(&self, named: &Engine<'_>, func: u32) -> Result<Found> {
        let signature = named.signature(func);
        let shape = named.read(func)?.shape();
        let wanted = bag(&shape);
        match self
            .by_shape
            .get(&(signature.clone(), shape))
            .map(|s| &s[..])
        {
            Some([one]) => return Ok(Found::Exact(*one)),
            Some(same) => {
                return Ok(Found::None {
                    same_shape: same.len(),
                })
            }
            None => {}
        }
        let Some(candidates) = self.by_type.get(&signature) else {
            return Ok(Found::None { same_shape: 0 });
        };
        let mut scores: Vec<(f64, u32)> = candidates
            .iter()
            .map(|(f, b)| (overlap(&wanted, b), *f))
            .collect();
        scores.sort_by(|a, b| b.0.total_cmp(&a.0));
        let next = scores.get(1).map_or(0.0, |s| s.0);
        Ok(match scores.first() {
            Some(&(best, f)) if best >= NEAR && best - next >= MARGIN => Found::Near(f, best),
            _ => Found::None { same_shape: 0 },
        })
    }
}
