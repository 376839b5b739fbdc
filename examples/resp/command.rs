//! Command execution, shared by both servers: a parsed request in, replies staged in the output.
//!
//! Commands: PING, ECHO, SET (EX, PX, NX, XX, KEEPTTL), GET, DEL, EXISTS, INCR, MGET, MSET,
//! FLUSHALL, DBSIZE, SELECT (0 only), QUIT, and enough of CONFIG GET (`save`, `appendonly`) and COMMAND
//! (empty answers) for `redis-benchmark` and `redis-cli`. Replies, including error messages, are
//! Redis 7.0's for the usual forms (`tests-integration/tests/resp_clients.rs` compares them byte for byte with
//! `redis-server`'s); the corner cases that differ are listed in the README ("Servers").

use std::borrow::Cow;
use std::time::Duration;

use super::reply::{self, Reply, EMPTY_ARRAY, NIL, OK};
use super::store::{Condition, Expiry, Kept, Store, Value};

/// A parsed request, as the commands see it.
pub trait Args {
    type Value: Value;

    /// Number of arguments (the command name included); at least 1.
    fn argc(&self) -> usize;

    /// Argument `i`'s bytes (borrowed, except a large argument spread over segments).
    fn arg(&self, i: usize) -> Cow<'_, [u8]>;

    /// Argument `i` as a value to store (copied where the key space keeps it if small, a large
    /// one shared without copying). Call at most once per argument.
    fn take_value(&mut self, i: usize) -> Self::Value;

    /// The request was malformed: the protocol error to answer instead of executing it.
    fn protocol_error(&self) -> Option<&str>;
}

/// How the key space keeps the values of `A`'s requests.
type KeptBy<A> = <<A as Args>::Value as Value>::Kept;

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// QUIT: flush the replies, then close.
    Close,
}

/// Execute one request against `store`, staging its reply in `out`.
pub fn execute<A, O>(store: &mut Store<A::Value>, args: &mut A, out: &mut O) -> Flow
where
    A: Args,
    O: Reply<KeptBy<A>>,
{
    if let Some(message) = args.protocol_error() {
        reply::error(out, message);
        return Flow::Continue;
    }
    store.begin_request();
    let mut name = [0u8; 16];
    let command = {
        let arg = args.arg(0);
        let n = arg.len().min(name.len());
        name[..n].copy_from_slice(&arg[..n]);
        name[..n].make_ascii_uppercase();
        if arg.len() > name.len() {
            &[][..]
        } else {
            &name[..n]
        }
    };
    let argc = args.argc();
    match command {
        b"GET" if argc == 2 => match store.get(&args.arg(1)) {
            Some(value) => out.bulk(value),
            None => out.raw(NIL),
        },
        b"SET" if argc >= 3 => set(store, args, out),
        b"PING" if argc <= 2 => {
            if argc == 1 {
                out.raw(b"+PONG\r\n");
            } else {
                reply::bulk_bytes(out, &args.arg(1));
            }
        }
        b"ECHO" if argc == 2 => reply::bulk_bytes(out, &args.arg(1)),
        b"INCR" if argc == 2 => incr(store, args, out),
        b"DEL" if argc >= 2 => {
            let removed = (1..argc).filter(|&i| store.remove(&args.arg(i))).count();
            reply::integer(out, removed as i64);
        }
        b"EXISTS" if argc >= 2 => {
            let found = (1..argc).filter(|&i| store.contains(&args.arg(i))).count();
            reply::integer(out, found as i64);
        }
        b"MGET" if argc >= 2 => {
            reply::array(out, argc - 1);
            for i in 1..argc {
                match store.get(&args.arg(i)) {
                    Some(value) => out.bulk(value),
                    None => out.raw(NIL),
                }
            }
        }
        b"MSET" if argc >= 3 && argc % 2 == 1 => {
            for i in (1..argc).step_by(2) {
                let value = args.take_value(i + 1);
                store.set(&args.arg(i), value, Condition::Always, Expiry::Never);
            }
            out.raw(OK);
        }
        b"FLUSHALL" if argc <= 2 => {
            if argc == 2 && !is_any(&args.arg(1), &[b"ASYNC", b"SYNC"]) {
                reply::error(out, "ERR syntax error");
            } else {
                store.clear();
                out.raw(OK);
            }
        }
        b"DBSIZE" if argc == 1 => reply::integer(out, store.len() as i64),
        b"SELECT" if argc == 2 => match parse_int(&args.arg(1)) {
            Some(0) => out.raw(OK),
            Some(_) => reply::error(out, "ERR DB index is out of range"),
            None => reply::error(out, "ERR value is not an integer or out of range"),
        },
        b"QUIT" => {
            out.raw(OK);
            return Flow::Close;
        }
        b"CONFIG" if argc >= 2 => config(args, out),
        b"COMMAND" => command_info(args, out),
        b"GET" | b"SET" | b"PING" | b"ECHO" | b"INCR" | b"DEL" | b"EXISTS" | b"MGET" | b"MSET"
        | b"FLUSHALL" | b"DBSIZE" | b"SELECT" | b"CONFIG" => {
            let message = format!(
                "ERR wrong number of arguments for '{}' command",
                String::from_utf8_lossy(&args.arg(0)).to_lowercase()
            );
            reply::error(out, &message);
        }
        _ => unknown_command(args, out),
    }
    Flow::Continue
}

/// SET key value [NX | XX] [EX seconds | PX milliseconds | KEEPTTL]
fn set<A: Args, O: Reply<KeptBy<A>>>(store: &mut Store<A::Value>, args: &mut A, out: &mut O) {
    let (mut condition, mut expiry) = (Condition::Always, Expiry::Never);
    let mut i = 3;
    while i < args.argc() {
        let option = args.arg(i);
        let unit = if option.eq_ignore_ascii_case(b"EX") {
            Some(1000)
        } else if option.eq_ignore_ascii_case(b"PX") {
            Some(1)
        } else {
            None
        };
        match unit {
            Some(unit) if expiry == Expiry::Never && i + 1 < args.argc() => {
                let Some(n) = parse_int(&args.arg(i + 1)) else {
                    return reply::error(out, "ERR value is not an integer or out of range");
                };
                let at = (n > 0)
                    .then(|| n.checked_mul(unit))
                    .flatten()
                    .and_then(|millis| {
                        store
                            .now()
                            .checked_add(Duration::from_millis(millis as u64))
                    });
                let Some(at) = at else {
                    return reply::error(out, "ERR invalid expire time in 'set' command");
                };
                expiry = Expiry::At(at);
                i += 2;
                continue;
            }
            _ => {}
        }
        if option.eq_ignore_ascii_case(b"NX") && condition == Condition::Always {
            condition = Condition::IfAbsent;
        } else if option.eq_ignore_ascii_case(b"XX") && condition == Condition::Always {
            condition = Condition::IfPresent;
        } else if option.eq_ignore_ascii_case(b"KEEPTTL") && expiry == Expiry::Never {
            expiry = Expiry::Keep;
        } else {
            return reply::error(out, "ERR syntax error");
        }
        i += 1;
    }
    let value = args.take_value(2);
    if store.set(&args.arg(1), value, condition, expiry) {
        out.raw(OK);
    } else {
        out.raw(NIL);
    }
}

fn incr<A: Args, O: Reply<KeptBy<A>>>(store: &mut Store<A::Value>, args: &A, out: &mut O) {
    let key = args.arg(1);
    let current = match store.get(&key) {
        None => 0,
        Some(value) => {
            let mut digits = [0u8; 20];
            let mut len = 0;
            let mut fits = value.len() <= digits.len();
            if fits {
                value.for_each_chunk(|chunk| {
                    digits[len..len + chunk.len()].copy_from_slice(chunk);
                    len += chunk.len();
                });
            }
            fits &= len > 0;
            match parse_int(&digits[..len]).filter(|_| fits) {
                Some(n) => n,
                None => return reply::error(out, "ERR value is not an integer or out of range"),
            }
        }
    };
    let Some(next) = current.checked_add(1) else {
        return reply::error(out, "ERR increment or decrement would overflow");
    };
    let formatted = reply::Header::new(b':', next);
    store.replace(&key, A::Value::copy_from(formatted.digits()));
    out.raw(formatted.as_bytes());
}

/// CONFIG GET: the two parameters `redis-benchmark` asks for (`save` and `appendonly`, as a
/// server without persistence has them); every other parameter is unknown (an empty answer).
fn config<A: Args, O: Reply<KeptBy<A>>>(args: &A, out: &mut O) {
    let sub = args.arg(1);
    if !sub.eq_ignore_ascii_case(b"GET") {
        let message = format!(
            "ERR unknown subcommand '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&sub)
        );
        return reply::error(out, &message);
    }
    if args.argc() < 3 {
        return reply::error(
            out,
            "ERR wrong number of arguments for 'config|get' command",
        );
    }
    const PARAMETERS: [(&[u8], &[u8]); 2] = [(b"save", b""), (b"appendonly", b"no")];
    let matches = |name: &[u8]| {
        (2..args.argc()).any(|i| {
            let pattern = args.arg(i);
            &*pattern == b"*" || pattern.eq_ignore_ascii_case(name)
        })
    };
    let found: Vec<_> = PARAMETERS
        .iter()
        .filter(|(name, _)| matches(name))
        .collect();
    reply::array(out, found.len() * 2);
    for (name, value) in found {
        reply::bulk_bytes(out, name);
        reply::bulk_bytes(out, value);
    }
}

/// COMMAND, COMMAND DOCS, COMMAND INFO: no documentation (an empty array, which `redis-cli`
/// accepts); COMMAND COUNT: 0.
fn command_info<A: Args, O: Reply<KeptBy<A>>>(args: &A, out: &mut O) {
    if args.argc() >= 2 && args.arg(1).eq_ignore_ascii_case(b"COUNT") {
        reply::integer(out, 0);
    } else {
        out.raw(EMPTY_ARRAY);
    }
}

/// Redis 7.0's message: the command (up to 128 bytes) and the first 128 bytes of its arguments,
/// each quoted.
fn unknown_command<A: Args, O: Reply<KeptBy<A>>>(args: &A, out: &mut O) {
    let name = args.arg(0);
    let mut message = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&name[..name.len().min(128)])
    );
    let prefix = message.len();
    for i in 1..args.argc() {
        let room = 128usize.saturating_sub(message.len() - prefix);
        if room == 0 {
            break;
        }
        let arg = args.arg(i);
        message.push('\'');
        message.push_str(&String::from_utf8_lossy(&arg[..arg.len().min(room)]));
        message.push_str("' ");
    }
    reply::error(out, &message);
}

fn is_any(arg: &[u8], options: &[&[u8]]) -> bool {
    options
        .iter()
        .any(|option| arg.eq_ignore_ascii_case(option))
}

/// A decimal i64 as Redis's `string2ll` accepts it: optional `-`, digits, no leading zero, no
/// spaces.
pub fn parse_int(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && bytes.len() > 1) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(d)?
        } else {
            value.checked_add(d)?
        };
    }
    Some(value)
}
