//! YAML reading with one set of rules everywhere: only `true`/`false` are booleans
//! (YAML 1.2), so a node named `n` or a label value `no` stays a string.

use serde::de::DeserializeOwned;

fn options() -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    o.strict_booleans = true;
    o
}

pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, options())
}

pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, serde_saphyr::Error> {
    serde_saphyr::from_multiple_with_options(text, options())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_true_and_false_are_booleans() {
        let v: serde_json::Value = super::from_str("{a: n, b: yes, c: true, d: 'on'}").unwrap();
        assert_eq!(v["a"], "n");
        assert_eq!(v["b"], "yes");
        assert_eq!(v["c"], true);
    }
}
