//! Declarative stream services: `#[input]`, `#[output]` and `#[stream_listener]`.
//!
//! ```
//! use binder_core::runtime::{Out, State};
//! use stream_macros::{input, output, stream_listener};
//!
//! #[input("orders-in")]
//! pub struct OrdersIn;
//!
//! #[output("invoices-out")]
//! pub struct InvoicesOut;
//!
//! #[output("audit-out")]
//! pub struct AuditOut;
//!
//! #[derive(serde::Deserialize)]
//! pub struct Order { id: u64 }
//!
//! /// Invoices every created order; the return value goes to `invoices-out`.
//! #[stream_listener(input = OrdersIn, output = InvoicesOut, condition = "headers['type'] == 'created'")]
//! async fn invoice(order: Order, audit: Out<AuditOut>) -> Result<String, binder_core::runtime::SendError> {
//!     audit.send(&format!("invoicing {}", order.id)).await?;
//!     Ok(format!("invoice for {}", order.id))
//! }
//!
//! assert_eq!(OrdersIn::NAME, "orders-in");
//! assert_eq!(invoice_listener.input, "orders-in");
//! assert_eq!(invoice_listener.output, Some("invoices-out"));
//! assert_eq!(invoice_listener.uses, &["audit-out"]);
//! ```
//!
//! Generated code names `binder_core` by absolute path: a service depends on `binder-core`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, ItemFn, ItemStruct, LitStr, PathArguments, ReturnType, Type,
    parse_macro_input,
};

#[path = "../../binder-core/src/runtime/spel/syntax/mod.rs"]
#[allow(dead_code)]
mod spel;

fn binding_name(attr: TokenStream, what: &str) -> Result<LitStr, syn::Error> {
    syn::parse::<LitStr>(attr).map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected the binding name as a string: #[{what}(\"orders-in\")]"),
        )
    })
}

fn declare(attr: TokenStream, item: TokenStream, output: bool) -> TokenStream {
    let what = if output { "output" } else { "input" };
    let name = match binding_name(attr, what) {
        Ok(n) => n,
        Err(e) => return e.to_compile_error().into(),
    };
    if name.value().is_empty() {
        return syn::Error::new(name.span(), "a binding name cannot be empty")
            .to_compile_error()
            .into();
    }
    let item = parse_macro_input!(item as ItemStruct);
    let ident = &item.ident;
    let (imp, ty, wh) = item.generics.split_for_impl();
    let register = if output {
        quote! {
            ::binder_core::__private::inventory::submit! {
                ::binder_core::runtime::OutputRegistration(#name)
            }
            impl #imp ::binder_core::runtime::OutputBinding for #ident #ty #wh {
                const NAME: &'static str = #name;
            }
        }
    } else {
        quote! {
            impl #imp ::binder_core::runtime::InputBinding for #ident #ty #wh {
                const NAME: &'static str = #name;
            }
        }
    };
    quote! {
        #item
        impl #imp #ident #ty #wh {
            /// The binding name, as configuration spells it.
            pub const NAME: &'static str = #name;
        }
        #register
    }
    .into()
}

/// Declares an input binding on a struct: `#[input("orders-in")] pub struct OrdersIn;`.
/// Listeners name the struct, so a typo is a compile error, and the struct carries the name
/// (`OrdersIn::NAME`).
#[proc_macro_attribute]
pub fn input(attr: TokenStream, item: TokenStream) -> TokenStream {
    declare(attr, item, false)
}

/// Declares an output binding on a struct: `#[output("invoices-out")] pub struct Invoices;`.
/// Declared outputs are opened by `AppBuilder::registered` and sent to with `Out<Invoices>`
/// listener arguments or `RunningApp::output`.
#[proc_macro_attribute]
pub fn output(attr: TokenStream, item: TokenStream) -> TokenStream {
    declare(attr, item, true)
}

#[derive(Default)]
struct ListenerArgs {
    input: Option<syn::Path>,
    output: Option<syn::Path>,
    condition: Option<LitStr>,
    /// `schema`: the payload type must implement `schemars::JsonSchema`.
    schema: Option<Span>,
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

fn first_generic(seg: &syn::PathSegment) -> Option<&Type> {
    match &seg.arguments {
        PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    }
}

fn is_unit(ty: &Type) -> bool {
    matches!(ty, Type::Tuple(t) if t.elems.is_empty())
}

/// The type a listener replies with: its return type, inside `Result` or `Option`; none for
/// `()`, a `Message` (its payload is not typed) or a type that cannot be named (`impl Trait`).
fn reply_type(ret: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = ret else {
        return None;
    };
    let seg = last_segment(ty);
    let inner = match seg.map(|s| s.ident.to_string()).as_deref() {
        Some("Result" | "Option") => seg.and_then(first_generic)?,
        _ => ty,
    };
    let named =
        matches!(inner, Type::Path(_)) || matches!(inner, Type::Tuple(t) if !t.elems.is_empty());
    let message = last_segment(inner).is_some_and(|s| s.ident == "Message");
    (named && !message).then_some(inner)
}

/// How the return value becomes an outcome; `None` when the signature is wrong.
fn return_conversion(ret: &ReturnType, has_output: bool) -> Result<TokenStream2, syn::Error> {
    let value = quote! { __result };
    let ty = match ret {
        ReturnType::Default => return Ok(value),
        ReturnType::Type(_, ty) => ty,
    };
    if is_unit(ty) {
        return Ok(value);
    }
    let seg = last_segment(ty);
    let wrapper = seg.map(|s| s.ident.to_string());
    let inner_unit = seg.and_then(first_generic).is_some_and(is_unit);
    // A `Message` (bare, in `Option` or in `Result`) is sent as it is, not serialised.
    let replied = match wrapper.as_deref() {
        Some("Result" | "Option") => seg.and_then(first_generic),
        _ => Some(&**ty),
    };
    let message = replied
        .and_then(last_segment)
        .is_some_and(|s| s.ident == "Message");
    match (wrapper.as_deref(), has_output) {
        (Some("Result"), false) if inner_unit => Ok(value),
        (_, true) if message => Ok(value),
        (Some("Result" | "Option"), true) => {
            Ok(quote! { #value.map(::binder_core::runtime::Reply) })
        }
        (_, true) => Ok(quote! { ::binder_core::runtime::Reply(#value) }),
        (_, false) => Err(syn::Error::new(
            ty.span(),
            "this listener returns a value but names no `output` binding for it: add `output = SomeOutput` to #[stream_listener], or return `()` / `Result<(), E>`",
        )),
    }
}

/// Marks a plain `async fn` as the listener of an input binding.
///
/// `#[stream_listener(input = OrdersIn, output = InvoicesOut, condition = "headers['type'] == 'created'")]`
///
/// * `input` (required): a type declared with `#[input]`, or `Sink`;
/// * `output`: where the return value goes (SCSt's `@SendTo`); the function then returns a
///   value, an `Option` or a `Result` of one; a value is encoded with the output's content
///   type (and its type is the output's payload in the AsyncAPI document), a `Message` is
///   sent as it is;
/// * `condition`: which messages this listener takes, from their headers
///   (`headers['type'] == 'created'`, `!=`, `&&`, `||`, `!`, parentheses, `null`). Several
///   listeners may share an input: a message goes to the one whose condition matches, else to
///   the listener without a condition; none or several matching is a failure (dead-letter
///   path), never a silent drop;
/// * `schema`: the payload type must implement `schemars::JsonSchema` (a compile error
///   otherwise, and without binder-core's `schemars` feature), so that its schema is in the
///   AsyncAPI document. Without it, the schema is there when the type implements
///   `JsonSchema`, and the document says why not otherwise.
///
/// Arguments, in any order: the payload (any `Deserialize` type, at most one), `Message`,
/// `Headers`, `Incoming` (the whole delivery), `Out<SomeOutput>` handles and `State<T>`
/// shared state. The macro keeps the function as written and adds a nameable
/// `<fn>_listener` value (registered with `inventory`, or by hand with
/// `AppBuilder::register`). Its handler is built when the application starts, resolving the
/// `Out<...>` and `State<T>` arguments once; each call decodes the payload from the borrowed
/// delivery (`handler::call`).
#[proc_macro_attribute]
pub fn stream_listener(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut args = ListenerArgs::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("input") {
            args.input = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("output") {
            args.output = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("condition") {
            args.condition = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("schema") {
            args.schema = Some(meta.path.span());
            Ok(())
        } else {
            Err(meta.error(
                "unknown #[stream_listener] argument; expected `input = ...`, `output = ...`, `condition = \"...\"` or `schema`",
            ))
        }
    });
    let original = TokenStream2::from(item.clone());
    // On a misuse, the function is kept as written next to the error, so the only message
    // is the one that explains the misuse (no follow-on "unused import" noise).
    if let Err(e) = syn::parse::Parser::parse(parser, attr) {
        let e = e.to_compile_error();
        return quote! { #original #e }.into();
    }
    let func = parse_macro_input!(item as ItemFn);
    match listener(args, func) {
        Ok(tokens) => tokens.into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote! { #original #e }.into()
        }
    }
}

fn listener(args: ListenerArgs, func: ItemFn) -> Result<TokenStream2, syn::Error> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "#[stream_listener] needs an `async fn`: write `async fn` (handlers run on the async runtime)",
        ));
    }
    let Some(input) = &args.input else {
        return Err(syn::Error::new(
            Span::call_site(),
            "#[stream_listener] needs `input = SomeInput` (a type declared with #[input(\"...\")], or `Sink`)",
        ));
    };
    if let Some(cond) = &args.condition {
        if let Err(e) = spel::parser::condition(&cond.value()) {
            return Err(syn::Error::new(cond.span(), e.to_string()));
        }
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a #[stream_listener] function cannot be generic",
        ));
    }

    // Resolved once, when the application starts: `Out<...>` and `State<...>` arguments.
    let mut resolve = Vec::new();
    // Per call, from the borrowed delivery: the payload decoded in place, clones of what
    // the function takes by value.
    let mut extract = Vec::new();
    // The same for a batch (`consumer.batchMode`): a listener whose payload is a `Vec<T>`
    // and whose other arguments are resolved at startup takes batches too, each message's
    // payload a `T`. `None` once an argument rules that out.
    let mut batch_extract = Some(Vec::new());
    // The variables `resolve` makes, which both closures of a batch listener keep a copy of.
    let mut resolved = Vec::new();
    let mut call_args = Vec::new();
    let mut uses = Vec::new();
    let mut states = Vec::new();
    let mut payload_seen: Option<Span> = None;
    let mut payload_type: Option<&Type> = None;
    // `T` of a `Vec<T>` payload argument.
    let mut batch_item: Option<&Type> = None;
    let mut incoming_arg: Option<syn::Ident> = None;
    for (i, arg) in sig.inputs.iter().enumerate() {
        let FnArg::Typed(pat) = arg else {
            return Err(syn::Error::new(
                arg.span(),
                "a #[stream_listener] is a free function: it cannot take `self`",
            ));
        };
        let var = format_ident!("__arg{}", i);
        let ty = &pat.ty;
        let seg = last_segment(ty);
        let kind = seg.map(|s| s.ident.to_string()).unwrap_or_default();
        let span = ty.span();
        match kind.as_str() {
            "Incoming" => {
                if incoming_arg.is_some() {
                    return Err(syn::Error::new(
                        span,
                        "only one `Incoming` argument is allowed",
                    ));
                }
                incoming_arg = Some(var.clone());
                extract.push(quote_spanned! {span=> let #var: #ty = __call.to_incoming(); });
                batch_extract = None;
            }
            "Message" => {
                extract.push(quote_spanned! {span=> let #var: #ty = ::core::clone::Clone::clone(__call.message); });
                batch_extract = None;
            }
            "Headers" => {
                extract.push(
                    quote_spanned! {span=> let #var: #ty = ::core::clone::Clone::clone(&__call.message.headers); },
                );
                batch_extract = None;
            }
            "Out" => {
                let Some(binding) = seg.and_then(first_generic) else {
                    return Err(syn::Error::new(
                        span,
                        "write `Out<SomeOutput>` with the output binding's type",
                    ));
                };
                uses.push(quote_spanned! {span=> <#binding as ::binder_core::runtime::OutputBinding>::NAME });
                resolve
                    .push(quote_spanned! {span=> let #var: #ty = __context.out::<#binding>()?; });
                resolved.push(var.clone());
                extract.push(quote! { let #var = ::core::clone::Clone::clone(&#var); });
                if let Some(b) = batch_extract.as_mut() {
                    b.push(quote! { let #var = ::core::clone::Clone::clone(&#var); });
                }
            }
            "State" => {
                let Some(inner) = seg.and_then(first_generic) else {
                    return Err(syn::Error::new(
                        span,
                        "write `State<T>` with the state's type",
                    ));
                };
                states.push(
                    quote_spanned! {span=> ::binder_core::runtime::StateType::of::<#inner>() },
                );
                resolve
                    .push(quote_spanned! {span=> let #var: #ty = __context.state::<#inner>()?; });
                resolved.push(var.clone());
                extract.push(quote! { let #var = ::core::clone::Clone::clone(&#var); });
                if let Some(b) = batch_extract.as_mut() {
                    b.push(quote! { let #var = ::core::clone::Clone::clone(&#var); });
                }
            }
            _ => {
                if let Some(first) = payload_seen {
                    let mut e = syn::Error::new(
                        span,
                        "a listener takes at most one payload argument; other arguments must be `Message`, `Headers`, `Incoming`, `Out<...>` or `State<...>`",
                    );
                    e.combine(syn::Error::new(first, "the payload argument is this one"));
                    return Err(e);
                }
                payload_seen = Some(span);
                payload_type = Some(ty);
                extract.push(quote_spanned! {span=>
                    let #var: #ty = match __call.decoded::<#ty>() {
                        ::core::result::Result::Ok(v) => v,
                        ::core::result::Result::Err(e) => return ::core::result::Result::Err(e),
                    };
                });
                let item = seg.filter(|s| s.ident == "Vec").and_then(first_generic);
                batch_item = item;
                match (item, batch_extract.as_mut()) {
                    (Some(item), Some(b)) => b.push(quote_spanned! {span=>
                        let #var: #ty = match __batch.decoded::<#item>() {
                            ::core::result::Result::Ok(v) => v,
                            ::core::result::Result::Err(e) => return ::core::result::Result::Err(e),
                        };
                    }),
                    _ => batch_extract = None,
                }
            }
        }
        call_args.push(var);
    }
    // The payload type for the AsyncAPI document: with its schema when it implements
    // `JsonSchema` (told at compile time by binder-core's `__payload_type!`), or required to
    // with `schema`.
    let payload = match (payload_type, args.schema) {
        (Some(ty), None) => {
            quote! { ::core::option::Option::Some(|| ::binder_core::__payload_type!(#ty)) }
        }
        (Some(ty), Some(_)) => quote_spanned! {ty.span()=>
            ::core::option::Option::Some(|| ::binder_core::__payload_type_with_schema!(#ty))
        },
        (None, Some(span)) => {
            return Err(syn::Error::new(
                span,
                "`schema` asks for the payload argument's JSON Schema, but this listener takes no payload argument",
            ));
        }
        (None, None) => quote! { ::core::option::Option::None },
    };

    // Each message's payload type on a batch binding, for the AsyncAPI document.
    let batch_payload = match batch_item.filter(|_| batch_extract.is_some()) {
        Some(item) => {
            quote! { ::core::option::Option::Some(|| ::binder_core::__payload_type!(#item)) }
        }
        None => quote! { ::core::option::Option::None },
    };

    // The return value's type, for the output's payload in the AsyncAPI document.
    let reply = match reply_type(&sig.output).filter(|_| args.output.is_some()) {
        Some(ty) => {
            quote! { ::core::option::Option::Some(|| ::binder_core::__payload_type!(#ty)) }
        }
        None => quote! { ::core::option::Option::None },
    };
    let conversion = return_conversion(&sig.output, args.output.is_some())?;
    let fn_name = &sig.ident;
    let vis = &func.vis;
    let def_name = format_ident!("{}_listener", fn_name);
    let make = format_ident!("__{}_make_handler", fn_name);
    let name = fn_name.to_string();
    let input_name =
        quote_spanned! {input.span()=> <#input as ::binder_core::runtime::InputBinding>::NAME };
    let output_name = match &args.output {
        Some(o) => {
            quote_spanned! {o.span()=> ::core::option::Option::Some(<#o as ::binder_core::runtime::OutputBinding>::NAME) }
        }
        None => quote! { ::core::option::Option::None },
    };
    let condition = match &args.condition {
        Some(c) => quote! { ::core::option::Option::Some(#c) },
        None => quote! { ::core::option::Option::None },
    };
    let doc = format!(
        "The listener declared by `{name}`: register it with `AppBuilder::register(&{def_name})`."
    );

    let one = quote! {
        move |__call: ::binder_core::runtime::Call<'_>| {
            #(#extract)*
            ::core::result::Result::Ok(async move {
                let __result = #fn_name(#(#call_args),*).await;
                ::binder_core::runtime::IntoOutcome::into_outcome(#conversion)
            })
        }
    };
    // A listener without a payload argument takes no batches either.
    let build = match batch_extract.filter(|_| payload_type.is_some()) {
        None => quote! {
            ::core::result::Result::Ok(::std::sync::Arc::new(
                ::binder_core::runtime::handler::call(#one),
            ))
        },
        Some(batch_extract) => quote! {
            let __for_batch = (#(::core::clone::Clone::clone(&#resolved),)*);
            let __one = #one;
            let (#(#resolved,)*) = __for_batch;
            let __batch = move |__batch: ::binder_core::runtime::Batch<'_>| {
                #(#batch_extract)*
                ::core::result::Result::Ok(async move {
                    let __result = #fn_name(#(#call_args),*).await;
                    ::binder_core::runtime::IntoOutcome::into_outcome(#conversion)
                })
            };
            ::core::result::Result::Ok(::std::sync::Arc::new(
                ::binder_core::runtime::handler::call_or_batch(__one, __batch),
            ))
        },
    };

    Ok(quote! {
        #func

        #[doc = #doc]
        #[allow(non_upper_case_globals)]
        #vis static #def_name: ::binder_core::runtime::ListenerDef = ::binder_core::runtime::ListenerDef {
            name: #name,
            input: #input_name,
            output: #output_name,
            condition: #condition,
            uses: &[#(#uses),*],
            states: &[#(#states),*],
            handler: #make,
            payload: #payload,
            batch_payload: #batch_payload,
            reply: #reply,
        };

        #[doc(hidden)]
        fn #make(
            __context: &::binder_core::runtime::Context,
        ) -> ::core::result::Result<
            ::std::sync::Arc<dyn ::binder_core::runtime::Handler>,
            ::binder_core::runtime::HandlerError,
        > {
            #(#resolve)*
            #build
        }

        ::binder_core::__private::inventory::submit! {
            ::binder_core::runtime::ListenerRegistration(&#def_name)
        }
    })
}

/// The README's examples, compiled as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
