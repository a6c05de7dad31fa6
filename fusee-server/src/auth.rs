//! Who may do what: the read and admin tokens, compared in constant time,
//! taken from an `Authorization: Bearer` header (the API) or the console's
//! cookie (its pages and forms). Tokens are never logged or echoed.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::App;
use crate::error::ApiError;

/// The console's cookie holding the token a person logged in with.
pub(crate) const TOKEN_COOKIE: &str = "fusee_token";
/// The console's cookie holding its CSRF token (the forms carry a copy).
pub(crate) const CSRF_COOKIE: &str = "fusee_csrf";

/// What a request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Access {
    /// Nothing: no token, or a wrong one.
    None,
    /// Lists, descriptions, journals, results.
    Read,
    /// Every verb.
    Admin,
}

impl Access {
    /// The word the console shows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Access::None => "none",
            Access::Read => "read",
            Access::Admin => "admin",
        }
    }
}

/// The tokens a server was given.
#[derive(Clone, Default)]
pub(crate) struct Tokens {
    pub(crate) admin: Option<String>,
    pub(crate) read: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("Tokens")
            .field("admin", &self.admin.is_some())
            .field("read", &self.read.is_some())
            .finish()
    }
}

impl Tokens {
    /// Whether the server runs without tokens (loopback only): every
    /// request has admin rights.
    pub(crate) fn open(&self) -> bool {
        self.admin.is_none() && self.read.is_none()
    }

    /// The rights of a request presenting `token`. Both tokens are
    /// compared whatever the first comparison says, each in time
    /// independent of where the bytes differ.
    pub(crate) fn access(&self, token: Option<&str>) -> Access {
        if self.open() {
            return Access::Admin;
        }
        let Some(token) = token else {
            return Access::None;
        };
        let same = |want: &Option<String>| {
            want.as_deref()
                .is_some_and(|w| bool::from(w.as_bytes().ct_eq(token.as_bytes())))
        };
        let (admin, read) = (same(&self.admin), same(&self.read));
        if admin {
            Access::Admin
        } else if read {
            Access::Read
        } else {
            Access::None
        }
    }
}

/// The bearer token of a request's `Authorization` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The value of cookie `name`, if the request sends it.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Routes any client may call: health, and the API's description.
pub(crate) const PUBLIC: [&str; 3] = ["/healthz", "/readyz", "/api/v1/openapi.json"];

/// The API's gate: a `GET` needs the read token (or the admin one), every
/// other method the admin token. Without tokens configured every request
/// passes (the server then listens on loopback only).
pub(crate) async fn api_gate(State(app): State<App>, req: Request, next: Next) -> Response {
    if PUBLIC.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let need = if matches!(*req.method(), Method::GET | Method::HEAD) {
        Access::Read
    } else {
        Access::Admin
    };
    let have = app.tokens.access(bearer(req.headers()));
    match refusal(have, need) {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    }
}

/// Why `have` does not allow what needs `need`, if it does not.
pub(crate) fn refusal(have: Access, need: Access) -> Option<ApiError> {
    if have >= need {
        return None;
    }
    Some(match have {
        Access::None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this request needs a token (Authorization: Bearer <token>): none was given, or it is not this server's",
        ),
        _ => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the read token cannot do this: it needs the admin token",
        ),
    })
}

/// A fresh random token (32 bytes from the OS, hex): CSRF tokens.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    // The OS generator fails only on a system without one; a CSRF token
    // then falls back to something no page can guess from outside.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes[..16].copy_from_slice(&nanos.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_give_their_rights_and_nothing_else() {
        let t = Tokens {
            admin: Some("admin-secret".into()),
            read: Some("read-secret".into()),
        };
        assert_eq!(t.access(Some("admin-secret")), Access::Admin);
        assert_eq!(t.access(Some("read-secret")), Access::Read);
        assert_eq!(t.access(Some("admin-secre")), Access::None);
        assert_eq!(t.access(Some("")), Access::None);
        assert_eq!(t.access(None), Access::None);
        assert_eq!(Tokens::default().access(None), Access::Admin);
        assert!(!format!("{t:?}").contains("secret"));
    }

    #[test]
    fn bearer_and_cookies_parse() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        h.insert(header::COOKIE, "a=1; fusee_token=xyz; b=2".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        assert_eq!(cookie(&h, TOKEN_COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, "c"), None);
        assert_eq!(random_token().len(), 64);
        assert_ne!(random_token(), random_token());
    }
}
