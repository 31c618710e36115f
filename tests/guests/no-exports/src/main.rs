//! A valid `wasm32-wasip2` component (a `wasi:cli/command`) that does not export the
//! `connector` world: the host must refuse to install it.

fn main() {}
