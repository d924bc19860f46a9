//! `--kernels` for every command: the kernels a list of names picks, in the facade's order.

use anyhow::{bail, Result};

/// Whether `--kernels` (`names`, every kernel without a list) picks the kernel called `name`.
pub fn picked(names: Option<&[String]>, name: &str) -> bool {
    names.is_none_or(|names| names.iter().any(|n| n == name))
}

/// The kernels of `all` named in `names` (every one without a list), in `all`'s order (the
/// facade's: fastest first) whatever order they were named in. A name that is in neither list is
/// an error that says what is compiled in; `also_known` are names another pass of the same
/// command takes (e.g. forward generations for `reliability`'s backward check), accepted here
/// and ignored.
pub fn named<K: ?Sized>(
    all: Vec<Box<K>>,
    name: impl Fn(&K) -> &'static str,
    names: Option<&[String]>,
    also_known: &[&str],
    what: &str,
) -> Result<Vec<Box<K>>> {
    let Some(names) = names else { return Ok(all) };
    let known: Vec<&str> = all.iter().map(|k| name(k)).collect();
    for n in names {
        if !known.contains(&n.as_str()) && !also_known.contains(&n.as_str()) {
            let mut have = known.clone();
            have.extend(also_known.iter().filter(|a| !known.contains(a)));
            bail!(
                "no {what} called '{n}' is compiled in; compiled in: {}",
                have.join(", ")
            );
        }
    }
    Ok(all
        .into_iter()
        .filter(|k| picked(Some(names), name(k)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_in_the_facade_order_and_names_what_exists() {
        let all = || flashcore::kernels();
        let every = named(all(), |k| k.name(), None, &[], "generation").unwrap();
        assert_eq!(every.len(), flashcore::kernels().len());
        let order: Vec<&str> = flashcore::kernels().iter().map(|k| k.name()).collect();
        let asked = vec![order[order.len() - 1].to_string(), order[0].to_string()];
        let got: Vec<&str> = named(all(), |k| k.name(), Some(&asked), &[], "generation")
            .unwrap()
            .iter()
            .map(|k| k.name())
            .collect();
        assert_eq!(got, [order[0], order[order.len() - 1]]);
        let Err(e) = named(
            all(),
            |k| k.name(),
            Some(&["nope".to_string()]),
            &[],
            "generation",
        ) else {
            panic!("an unknown name was accepted");
        };
        let e = e.to_string();
        assert!(e.contains("'nope'") && e.contains(order[0]), "{e}");
        let other = ["only-elsewhere"];
        let picked = named(
            all(),
            |k| k.name(),
            Some(&["only-elsewhere".to_string()]),
            &other,
            "x",
        );
        assert!(picked.unwrap().is_empty());
    }
}
