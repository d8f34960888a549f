//! Calling the HTTP API and reading what it answers, whatever the status:
//! the tests assert on the status and the JSON body together.

use serde_json::Value;

use super::TestServer;

/// The read-scoped API key of [`api_keys_toml`].
pub const READ: &str = "read-key-0123456789abcdef";
/// The write-scoped API key of [`api_keys_toml`].
pub const WRITE: &str = "write-key-0123456789abcdef";

/// Config text for two API keys: "ro" ([`READ`]) and "rw" ([`WRITE`]).
pub fn api_keys_toml() -> String {
    format!(
        "[[api_keys]]\nname = \"ro\"\nscope = \"read\"\nkey = \"{READ}\"\n\
         [[api_keys]]\nname = \"rw\"\nscope = \"write\"\nkey = \"{WRITE}\"\n"
    )
}

/// The status of `r` and its body: the JSON it holds, or the text as a JSON
/// string when it is not JSON.
pub async fn status_and_json(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Sends `req` with `body` as its JSON body, if any: the status and the
/// body of the answer ([`status_and_json`]).
pub async fn send_json(mut req: reqwest::RequestBuilder, body: Option<Value>) -> (u16, Value) {
    if let Some(b) = body {
        req = req.json(&b);
    }
    status_and_json(req.send().await.unwrap()).await
}

/// `method path` on `s`, with `key` as its `X-Api-Key` header if any and
/// `body` as JSON if any: the status and the body of the answer.
pub async fn call(
    s: &TestServer,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = s.client.request(method.parse().unwrap(), s.url(path));
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    send_json(req, body).await
}
