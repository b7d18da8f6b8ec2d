//! Bearer tokens an admin issues for agents (`cordon token issue`), as text: what both sides of
//! the split must agree on. The daemon draws, stores (hashed) and verifies them; the HTTP
//! front-end only checks that a request carries something shaped like one before it forwards it.
//!
//! A token is `cordon_<id>_<secret>`: `id` is 16 lowercase hex digits (8 random bytes, public:
//! listed, audited, used to revoke), `secret` 64 lowercase hex digits (32 random bytes, shown
//! once). cordond keeps only [`hash`] of the secret, so its token file never holds a secret.

use sha2::{Digest as _, Sha256};

/// What every token starts with (so that a leaked one is recognisable by secret scanners).
pub const PREFIX: &str = "cordon_";
/// Hex digits of a token's public id.
pub const ID_HEX: usize = 16;
/// Hex digits of a token's secret (256 bits).
pub const SECRET_HEX: usize = 64;
/// The length of a whole token.
pub const TOKEN_LEN: usize = PREFIX.len() + ID_HEX + 1 + SECRET_HEX;

/// A token, split into its public id and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer {
    pub id: String,
    secret: String,
}

impl std::fmt::Debug for Bearer {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bearer").field("id", &self.id).finish_non_exhaustive()
    }
}

/// Why a text is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("a cordon token starts with {PREFIX:?}; pass the whole token `cordon token issue` printed")]
    Prefix,
    #[error(
        "a cordon token is {TOKEN_LEN} characters ({PREFIX}, {ID_HEX} hex digits, `_`, {SECRET_HEX} hex digits), got {0}; \
         pass the whole token `cordon token issue` printed"
    )]
    Length(usize),
    #[error(
        "a cordon token is {PREFIX}, {ID_HEX} lowercase hex digits, `_`, {SECRET_HEX} lowercase hex digits; this one is not"
    )]
    Shape,
}

impl Bearer {
    /// A token from its parts (each already lowercase hex of the right length).
    pub fn from_parts(id: &str, secret: &str) -> Result<Bearer, TokenError> {
        Bearer::parse(&format!("{PREFIX}{id}_{secret}"))
    }

    /// Parses a token exactly (no surrounding space, lowercase hex only).
    pub fn parse(text: &str) -> Result<Bearer, TokenError> {
        let Some(rest) = text.strip_prefix(PREFIX) else { return Err(TokenError::Prefix) };
        if text.len() != TOKEN_LEN {
            return Err(TokenError::Length(text.len()));
        }
        // By bytes, but only at a character boundary: the length above counts bytes, and a
        // multi-byte character across the id's end would make `split_at` panic.
        let (Some(id), Some(secret)) = (rest.get(..ID_HEX), rest.get(ID_HEX..)) else {
            return Err(TokenError::Shape);
        };
        let Some(secret) = secret.strip_prefix('_') else { return Err(TokenError::Shape) };
        let hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex(id) || !hex(secret) {
            return Err(TokenError::Shape);
        }
        Ok(Bearer { id: id.to_string(), secret: secret.to_string() })
    }

    /// The token as text (what the agent host sends after `Bearer `).
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}_{}", self.id, self.secret)
    }

    /// The SHA-256 of the secret: what cordond stores and compares.
    pub fn hash(&self) -> [u8; 32] {
        hash(&self.secret)
    }
}

/// SHA-256 of a secret's text.
pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Compares two hashes in constant time (every byte is looked at, whatever differs first).
pub fn hashes_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization` header value: `Bearer <token>` (the scheme in any case, one
/// space). `None`: not the Bearer scheme at all.
pub fn from_authorization(value: &[u8]) -> Option<Result<Bearer, TokenError>> {
    let (scheme, rest) = (value.get(..7)?, value.get(7..)?);
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    Some(std::str::from_utf8(rest).map_err(|_| TokenError::Shape).and_then(Bearer::parse))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef";
    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn a_token_round_trips_and_never_prints_its_secret() {
        let text = format!("cordon_{ID}_{SECRET}");
        let t = Bearer::parse(&text).unwrap();
        assert_eq!(t.id, ID);
        assert_eq!(t.expose(), text);
        assert_eq!(t, Bearer::from_parts(ID, SECRET).unwrap());
        let shown = format!("{t:?}");
        assert!(!shown.contains(SECRET) && shown.contains(ID), "{shown}");
    }

    #[test]
    fn malformed_tokens_are_refused_with_what_is_wrong() {
        let good = format!("cordon_{ID}_{SECRET}");
        assert_eq!(Bearer::parse(&good[1..]), Err(TokenError::Prefix));
        assert_eq!(Bearer::parse(&format!("{good}0")), Err(TokenError::Length(TOKEN_LEN + 1)));
        assert_eq!(Bearer::parse(&good[..good.len() - 1]), Err(TokenError::Length(TOKEN_LEN - 1)));
        // Upper case, a missing separator, non-hex, a space: each is no token.
        assert_eq!(Bearer::parse(&good.to_uppercase().replace("CORDON_", "cordon_")), Err(TokenError::Shape));
        assert_eq!(Bearer::parse(&format!("cordon_{ID}x{SECRET}")), Err(TokenError::Shape));
        assert_eq!(Bearer::parse(&format!("cordon_{ID}_{}g", &SECRET[1..])), Err(TokenError::Shape));
        assert_eq!(Bearer::parse(&format!("cordon_{ID}_{} ", &SECRET[1..])), Err(TokenError::Shape));
        assert!(Bearer::parse(&format!("cordon_{ID}_{SECRET}").replace('a', "\u{e1}")).is_err());
    }

    /// Found writing the mcp_http fuzz target (docs/fuzzing.md): a token of the right length in bytes
    /// with a two-byte character across the end of its id panicked (`split_at` off a character
    /// boundary) in `cordon mcp --http` and in cordond, on a header anyone can send.
    #[test]
    fn a_character_across_the_end_of_the_id_is_refused_not_a_panic() {
        let text = format!("cordon_{}\u{e9}{SECRET}", &ID[..15]);
        assert_eq!(text.len(), TOKEN_LEN);
        assert_eq!(Bearer::parse(&text), Err(TokenError::Shape));
        let header = format!("Bearer {text}");
        assert_eq!(from_authorization(header.as_bytes()), Some(Err(TokenError::Shape)));
    }

    #[test]
    fn the_hash_is_sha256_of_the_secret_and_compares_exactly() {
        let t = Bearer::from_parts(ID, SECRET).unwrap();
        // sha256("0011...eeff" as text), computed independently (`printf %s ... | sha256sum`).
        let expected: [u8; 32] = Sha256::digest(SECRET.as_bytes()).into();
        assert_eq!(t.hash(), expected);
        assert!(hashes_equal(&t.hash(), &expected));
        let mut other = expected;
        other[31] ^= 1;
        assert!(!hashes_equal(&t.hash(), &other));
        other = expected;
        other[0] ^= 0x80;
        assert!(!hashes_equal(&t.hash(), &other));
        let other_secret = Bearer::from_parts(ID, &SECRET.replace('0', "1")).unwrap();
        assert_ne!(other_secret.hash(), t.hash());
    }

    #[test]
    fn authorization_headers_are_read_strictly() {
        let text = format!("cordon_{ID}_{SECRET}");
        assert_eq!(from_authorization(format!("Bearer {text}").as_bytes()), Some(Ok(Bearer::parse(&text).unwrap())));
        assert_eq!(from_authorization(format!("bearer {text}").as_bytes()), Some(Ok(Bearer::parse(&text).unwrap())));
        assert_eq!(from_authorization(format!("Basic {text}").as_bytes()), None);
        assert_eq!(from_authorization(b"Bearer"), None);
        assert_eq!(from_authorization(format!("Bearer  {text}").as_bytes()), Some(Err(TokenError::Prefix)));
        assert_eq!(from_authorization(b"Bearer \xff"), Some(Err(TokenError::Shape)));
    }
}
