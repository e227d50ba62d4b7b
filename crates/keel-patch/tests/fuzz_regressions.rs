//! Inputs that once broke an invariant under `cargo fuzz run appliers`, replayed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuzz_check;

/// A few hand-picked inputs, so the checks themselves are exercised by `cargo test`.
#[test]
fn the_fuzz_checks_pass_on_typical_inputs() {
    let inputs: &[&[u8]] = &[
        b"\x00{\"spec\":{\"containers\":[{\"name\":\"a\"}]}}\x00{\"spec\":{\"containers\":[{\"name\":\"b\"}]}}",
        b"\x01{\"spec\":{\"template\":{\"spec\":{\"volumes\":[{\"name\":\"v\",\"emptyDir\":{}}]}}}}\x00{\"spec\":{\"template\":{\"spec\":{\"volumes\":[{\"name\":\"v\",\"secret\":{}}]}}}}",
        b"\x12{\"spec\":{\"items\":[{\"a\":1},{\"a\":1,\"b\":0}],\"set\":[1,1]}}\x00{\"spec\":{\"items\":[{\"a\":2}],\"set\":[2]}}\x00{\"spec\":{\"set\":[3]}}",
        b"\x03{\"x\":[1,{\"name\":1},{\"name\":1}]}\x00{\"x\":[{\"name\":1,\"y\":[]}],\"z\":{}}",
        b"\x00[]\x00[{\"op\":\"add\",\"path\":\"/-\",\"value\":1}]",
    ];
    for input in inputs {
        fuzz_check::check(input);
    }
}

/// The modified document named a field `$patch`: the two-way patch carried it and could not be
/// applied. Documents with directive-named fields are now refused by the builders.
#[test]
fn a_document_with_a_directive_named_field_is_refused_not_diffed() {
    fuzz_check::check(
        b"\x10{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"x\"}]}}\x00{\"spec\":{\"$setElementOrder/containers\":[{\"name\":\"a\"}],\"containers\":[{\"name\":\"a\",\"$patch\":\"deiete\"}]},\"metadata\":{\"$deleteFromPrimitiveList/finalizers\":[\"f\"]}}\x00{\"spec\":{\"containers\":[{\"name\":\"a\",\"ima\\e\":\"z\"\x83,{\"name\":\"c\"}]}}",
    );
}

/// A JSON Patch whose last operation fails after an `add` at `/-`: json-patch's rollback
/// panicked. `apply_json_patch` now patches a copy without rollback.
#[test]
fn a_json_patch_that_fails_after_appending_is_an_error_not_a_panic() {
    fuzz_check::check(
        b"\x00{\"a\":[1,2]}\x00[{\"op\":\"add\",\"path\":\"/a/-\",\"value\":3},{\"op\":\"test\",\"path\":\"/a/0\",\"value\":1},{\"op\":\"move\",\"from\":\"/a\",\"path\":\"/bcontaine0tiveList/fntaine0ti\"}]",
    );
}
