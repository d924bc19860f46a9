//! The `FLASHCORE_*` overrides the plans read for A/B runs: where they come from (the process
//! environment, or a table a test passes in) and how a value parses, so that every plan takes
//! the same spellings. Each caller words its own refusal.

/// Where a plan reads its overrides.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Env<'static> {
    /// The process environment.
    pub fn process() -> Self {
        Env {
            lookup: &process_var,
        }
    }
}

impl<'a> Env<'a> {
    /// `lookup(name)` is the override's value, `None` when it is unset.
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Env { lookup }
    }

    /// The value as set, `None` when unset.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
    }

    /// The value as `parse` reads it; `Err(refuse(value))` when `parse` does not take it.
    pub fn parse<T>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Option<T>,
        refuse: impl FnOnce(&str) -> String,
    ) -> Result<Option<T>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => parse(&v).map(Some).ok_or_else(|| refuse(&v)),
        }
    }

    /// A flag ([`parse_flag`]).
    pub fn flag(
        &self,
        name: &str,
        refuse: impl FnOnce(&str) -> String,
    ) -> Result<Option<bool>, String> {
        self.parse(name, parse_flag, refuse)
    }

    /// A whole number that `allowed` takes (a list's `contains`, a range's).
    pub fn number(
        &self,
        name: &str,
        allowed: impl Fn(usize) -> bool,
        refuse: impl FnOnce(&str) -> String,
    ) -> Result<Option<usize>, String> {
        self.parse(name, |v| parse_number(v).filter(|&n| allowed(n)), refuse)
    }

    /// A count in `1..=max`, or the word `word`: `Some(Some(n))` for a count, `Some(None)` for the
    /// word (the split counts' `auto` and `sweep`).
    pub fn count_or(
        &self,
        name: &str,
        word: &str,
        max: usize,
        refuse: impl FnOnce(&str) -> String,
    ) -> Result<Option<Option<usize>>, String> {
        let count_or_word = |v: &str| match v.trim() {
            w if w == word => Some(None),
            n => parse_number(n).filter(|n| (1..=max).contains(n)).map(Some),
        };
        self.parse(name, count_or_word, refuse)
    }

    /// A flag where any other value counts as unset: the debugging switches, and the portable
    /// forward's overrides, which have never refused a value.
    pub fn flag_or_unset(&self, name: &str) -> Option<bool> {
        self.get(name).as_deref().and_then(parse_flag)
    }

    /// A whole number where any other value counts as unset (see [`Env::flag_or_unset`]).
    pub fn number_or_unset(&self, name: &str) -> Option<usize> {
        self.get(name).as_deref().and_then(parse_number)
    }
}

/// Tunables a plan reads from `FLASHCORE_*` overrides: from the process environment, or (tests,
/// A/B tools) through a lookup.
pub trait Overridable: Sized {
    /// The defaults with the overrides `env` sets applied; `Err` names a value not taken.
    fn read(env: Env) -> Result<Self, String>;

    /// [`Overridable::read`] from the process environment.
    fn from_env() -> Result<Self, String> {
        Self::read(Env::process())
    }

    /// [`Overridable::read`] with `lookup(name)` as each variable's value (`None`: unset).
    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        Self::read(Env::new(&lookup))
    }
}

/// `0|1|on|off|true|false|yes|no`, white space around it ignored.
pub fn parse_flag(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// A whole number, white space around it ignored.
pub fn parse_number(v: &str) -> Option<usize> {
    v.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_numbers_take_one_spelling_everywhere() {
        for (v, want) in [(" 1", Some(true)), ("on", Some(true)), ("no ", Some(false))] {
            assert_eq!(parse_flag(v), want, "{v:?}");
        }
        assert_eq!(parse_flag("2"), None);
        assert_eq!(parse_number(" 64 "), Some(64));
        assert_eq!(parse_number("-1"), None);
        let table = |name: &str| (name == "X").then(|| "5".to_string());
        let env = Env::new(&table);
        assert_eq!(env.number("X", |n| n < 8, |v| v.into()), Ok(Some(5)));
        assert_eq!(
            env.number("X", |n| n < 4, |v| format!("X={v}")),
            Err("X=5".into())
        );
        assert_eq!(env.number("Y", |_| false, |v| v.into()), Ok(None));
        assert_eq!(
            env.flag("X", |v| format!("X={v}: a flag")),
            Err("X=5: a flag".into())
        );
        assert_eq!(env.flag_or_unset("X"), None);
        assert_eq!(env.number_or_unset("X"), Some(5));
    }
}
