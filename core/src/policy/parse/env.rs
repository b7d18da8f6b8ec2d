//! A tool's environment: the `env` table, `args_env_prefix`, and the check that params exported
//! through the prefix collide with nothing.

use std::collections::BTreeMap;
use std::ops::Range;

use super::{Parser, Value};
use crate::policy::model::{BASE_ENV, Param, env_key_forbidden};

impl Parser<'_> {
    pub(super) fn env(&mut self, v: &Value<'_>) -> Option<BTreeMap<String, (String, Range<usize>)>> {
        let table = self.table(v, "env")?;
        let mut out = BTreeMap::new();
        for (k, val) in table {
            let key = k.get_ref().to_string();
            if !self.env_key(&key, k.span()) {
                continue;
            }
            if let Some(s) = self.string(val, &format!("env.{key}")) {
                if s.contains('\0') {
                    self.sink.error(val.span(), format!("env.{key} contains a NUL byte"));
                } else {
                    out.insert(key, (s, k.span()));
                }
            }
        }
        Some(out)
    }

    /// Whether `key` may be set in `env`; reports why not.
    pub(super) fn env_key(&mut self, key: &str, span: Range<usize>) -> bool {
        let valid = !key.is_empty()
            && !key.as_bytes()[0].is_ascii_digit()
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            self.sink.error(span, format!("invalid env key {key:?}: keys match ^[A-Za-z_][A-Za-z0-9_]*$"));
            return false;
        }
        if env_key_forbidden(key) {
            self.sink.error(
                span,
                format!("env key {key:?} is forbidden (PATH, LD_* and DYLD_* can redirect which code runs)"),
            );
            return false;
        }
        true
    }

    pub(super) fn args_env_prefix(&mut self, v: &Value<'_>) -> Option<(String, Range<usize>)> {
        let s = self.string(v, "args_env_prefix")?;
        let ok = !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && !s.as_bytes()[0].is_ascii_digit()
            && !env_key_forbidden(&s);
        if !ok {
            self.sink.error(v.span(), format!("args_env_prefix {s:?} must match ^[A-Z_][A-Z0-9_]*$ and must not start with LD_ or DYLD_, e.g. \"SPELL_ARG_\""));
        }
        ok.then(|| (s, v.span()))
    }

    /// Params exported as environment variables must not produce forbidden or base keys, nor
    /// keys `env` already sets.
    pub(super) fn check_exported_params(
        &mut self,
        prefix: &Option<(String, Range<usize>)>,
        params: &[Param],
        env: &BTreeMap<String, (String, Range<usize>)>,
    ) {
        let Some((prefix, span)) = prefix else {
            return;
        };
        for p in params {
            let key = format!("{prefix}{}", p.name.to_ascii_uppercase());
            if env_key_forbidden(&key) || BASE_ENV.contains(&key.as_str()) || env.contains_key(&key) {
                self.sink.error(
                    span.clone(),
                    format!("args_env_prefix {prefix:?} turns param {:?} into {key}, which is forbidden or already set; choose another prefix", p.name),
                );
            }
        }
    }
}
