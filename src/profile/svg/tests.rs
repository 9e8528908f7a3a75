use super::esc;

#[test]
fn names_are_escaped_into_well_formed_xml_text() {
    assert_eq!(esc("<script>&\"x\""), "&lt;script&gt;&amp;&quot;x&quot;");
    assert_eq!(esc("a\u{1}b\u{1b}[0m\u{fffe}"), "a\\u{1}b\\u{1b}[0m\\u{fffe}");
    assert_eq!(esc("tab\there é ✓"), "tab\there é ✓");
}
