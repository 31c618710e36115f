//! The echo tool for wassette: `acme.echo`'s behaviour (answer the message it was given)
//! in the component shape wassette runs, where every exported function is a tool.

wit_bindgen::generate!({ world: "echo", path: "wit" });

use exports::acme::{Echoed, Guest};

struct Echo;

impl Guest for Echo {
    fn echo(message: String) -> Echoed {
        Echoed { message }
    }
}

export!(Echo);
