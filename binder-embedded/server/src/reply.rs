//! Reply codes and the faults that close a channel or the connection, with RabbitMQ's texts
//! (`NOT_FOUND - no queue 'q' in vhost '/'`).

use stream_engine::AmqpError;

/// 320: the broker closed the connection (shutdown).
pub const CONNECTION_FORCED: u16 = 320;
/// 403.
pub const ACCESS_REFUSED: u16 = 403;
/// 406.
pub const PRECONDITION_FAILED: u16 = 406;
/// 501: a frame broke the framing rules.
pub const FRAME_ERROR: u16 = 501;
/// 502: a frame's fields could not be decoded.
pub const SYNTAX_ERROR: u16 = 502;
/// 503: a method that is not valid here.
pub const COMMAND_INVALID: u16 = 503;
/// 504: a method on a channel that is not open.
pub const CHANNEL_ERROR: u16 = 504;
/// 505: a frame out of order (content without a publish, a method inside content).
pub const UNEXPECTED_FRAME: u16 = 505;
/// 530: not allowed (vhost access, limits, negotiation).
pub const NOT_ALLOWED: u16 = 530;
/// 540: not implemented.
pub const NOT_IMPLEMENTED: u16 = 540;
/// 541: the broker failed.
pub const INTERNAL_ERROR: u16 = 541;

/// The AMQP constant name of a reply code.
pub fn code_name(code: u16) -> &'static str {
    match code {
        200 => "OK",
        312 => "NO_ROUTE",
        320 => "CONNECTION_FORCED",
        402 => "INVALID_PATH",
        403 => "ACCESS_REFUSED",
        404 => "NOT_FOUND",
        405 => "RESOURCE_LOCKED",
        406 => "PRECONDITION_FAILED",
        501 => "FRAME_ERROR",
        502 => "SYNTAX_ERROR",
        503 => "COMMAND_INVALID",
        504 => "CHANNEL_ERROR",
        505 => "UNEXPECTED_FRAME",
        506 => "RESOURCE_ERROR",
        530 => "NOT_ALLOWED",
        540 => "NOT_IMPLEMENTED",
        541 => "INTERNAL_ERROR",
        _ => "UNKNOWN",
    }
}

/// A close to send: code, text (without the constant name) and the method that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The reply code.
    pub code: u16,
    /// What happened.
    pub text: String,
    /// The class of the method that caused it (0: none).
    pub class_id: u16,
    /// The method that caused it (0: none).
    pub method_id: u16,
}

impl Close {
    /// A close for this code and text, caused by no particular method.
    pub fn new(code: u16, text: impl Into<String>) -> Self {
        Close {
            code,
            text: text.into(),
            class_id: 0,
            method_id: 0,
        }
    }

    /// The same close, blamed on a method.
    pub fn on(mut self, (class_id, method_id): (u16, u16)) -> Self {
        self.class_id = class_id;
        self.method_id = method_id;
        self
    }

    /// The reply text as RabbitMQ writes it: `NAME - text`.
    pub fn reply_text(&self) -> String {
        format!("{} - {}", code_name(self.code), self.text)
    }
}

/// What ends the handling of a frame abnormally.
#[derive(Debug)]
pub enum Fault {
    /// Close this channel (a soft error).
    Channel(u16, Close),
    /// Close the connection (a hard error).
    Connection(Close),
    /// The socket is gone: nothing more can be sent.
    Gone,
}

impl Fault {
    /// A connection error.
    pub fn connection(code: u16, text: impl Into<String>) -> Self {
        Fault::Connection(Close::new(code, text))
    }

    /// An engine error on a channel: the channel or, for connection-level codes, the
    /// connection.
    pub fn engine(channel: u16, error: AmqpError, method: (u16, u16)) -> Self {
        let close = Close::new(error.code.code(), error.text).on(method);
        if error.code.is_connection_error() {
            Fault::Connection(close)
        } else {
            Fault::Channel(channel, close)
        }
    }
}
