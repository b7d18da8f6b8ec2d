//! Workflows (`[workflows.NAME]`): what a load accepts, and each error it reports at the
//! workflow's or step's `file:line:col`.

use std::path::PathBuf;

use cordon_core::policy::{Host, LoadError, PolicySet, StepArg, load_sources};

static HOST: std::sync::LazyLock<Host> = std::sync::LazyLock::new(|| Host::new(false, 6));

const TOOLS: &str = r#"
version = 1

[tools.build]
description = "build"
reason = "r"
command = ["/bin/echo", "{{target}}", "{{jobs}}"]
[tools.build.params.target]
type = "string"
required = true
[tools.build.params.jobs]
type = "integer"
max = 8
default = 1

[tools.deploy]
description = "deploy"
reason = "r"
command = ["/bin/echo", "deploy"]
confirm = "agent"

[tools.version]
description = "prints the version as JSON"
reason = "r"
command = ["/bin/echo", "{\"version\": \"1.2\", \"build\": 7}"]
output = { type = "json", schema = { type = "object", properties = { version = { type = "string" }, build = { type = "integer" } } } }
"#;

fn load(workflows: &str) -> Result<PolicySet, LoadError> {
    load_sources(
        &[
            (PathBuf::from("a-tools.toml"), TOOLS.to_string()),
            (PathBuf::from("b-flows.toml"), format!("version = 1\n{workflows}")),
        ],
        &HOST,
    )
}

/// The rendered errors of a load that must fail.
#[track_caller]
fn errors(workflows: &str) -> String {
    match load(workflows) {
        Ok(_) => panic!("expected the load to fail:\n{workflows}"),
        Err(e) => e.diagnostics.iter().filter(|d| d.is_error()).map(|d| format!("{d}\n")).collect(),
    }
}

#[test]
fn a_valid_workflow_loads_with_its_steps_params_and_schema() {
    let set = load(
        r#"
[workflows.ship]
description = "build twice"
reason = "r"
allow = { users = [1000] }
[workflows.ship.params.target]
type = "string"
required = true
[[workflows.ship.steps]]
tool = "build"
args = { target = "{{target}}", jobs = 2 }
[[workflows.ship.steps]]
tool = "build"
args = { target = "docs" }
continue_on_error = true
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.workflows.len(), 1);
    let w = &set.workflows[0];
    assert_eq!(w.name, "ship");
    assert_eq!(w.steps.len(), 2);
    assert_eq!(w.steps[0].args["target"], StepArg::Param("target".into()));
    assert_eq!(w.steps[0].args["jobs"], StepArg::Literal(serde_json::json!(2)));
    assert!(!w.steps[0].continue_on_error);
    assert!(w.steps[1].continue_on_error);
    assert_eq!((w.steps[0].line, w.steps[0].column), (11, 8));
    let schema = w.input_schema.value();
    assert_eq!(schema["required"], serde_json::json!(["target"]));
    assert_eq!(schema["additionalProperties"], serde_json::json!(false));
}

#[test]
fn a_step_naming_an_unknown_tool_is_an_error_with_a_suggestion() {
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"biuld\"\nargs = { target = \"x\" }\n",
    );
    assert!(
        e.contains("b-flows.toml:6:8: step 1 of workflow \"w\" names tool \"biuld\", which no policy file defines"),
        "{e}"
    );
    assert!(e.contains("did you mean \"build\""), "{e}");
}

#[test]
fn a_step_argument_must_be_a_param_of_the_step_tool() {
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"x\", job = 2 }\n",
    );
    assert!(
        e.contains("b-flows.toml:7:30: step 1: tool \"build\" has no param \"job\" (its params: target, jobs)"),
        "{e}"
    );
}

#[test]
fn a_literal_must_fit_the_step_param() {
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"x\", jobs = 99 }\n",
    );
    assert!(e.contains("b-flows.toml:7:31: step 1: args.jobs does not fit param \"jobs\" of tool \"build\""), "{e}");
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = 5 }\n",
    );
    assert!(e.contains("args.target does not fit param \"target\""), "{e}");
}

#[test]
fn a_placeholder_must_name_a_workflow_param_and_be_a_whole_value() {
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"{{tagret}}\" }\n",
    );
    assert!(
        e.contains("b-flows.toml:7:19: args.target uses {{tagret}}, but the workflow has no param \"tagret\""),
        "{e}"
    );
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[workflows.w.params.t]\ntype = \"string\"\nrequired = true\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"v-{{t}}\" }\n",
    );
    assert!(e.contains("a placeholder must be the whole value"), "{e}");
}

#[test]
fn a_placeholder_type_must_fit_and_a_required_step_param_must_always_be_given() {
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[workflows.w.params.t]\ntype = \"boolean\"\nrequired = true\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"{{t}}\" }\n",
    );
    assert!(
        e.contains("workflow param \"t\" is of type boolean, but param \"target\" of tool \"build\" is of type string"),
        "{e}"
    );
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[workflows.w.params.t]\ntype = \"string\"\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"{{t}}\" }\n",
    );
    assert!(e.contains("make \"t\" required or give it a default"), "{e}");
    let e = errors("[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"build\"\n");
    assert!(
        e.contains("b-flows.toml:6:8: step 1: tool \"build\" requires param \"target\", which the step does not give"),
        "{e}"
    );
}

#[test]
fn a_confirm_tool_cannot_be_a_step() {
    let e = errors("[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.w.steps]]\ntool = \"deploy\"\n");
    assert!(e.contains("workflows cannot include confirm tools: call that tool on its own"), "{e}");
}

#[test]
fn a_workflow_name_cannot_be_a_tool_name() {
    let e = errors(
        "[workflows.build]\ndescription = \"d\"\nreason = \"r\"\n[[workflows.build.steps]]\ntool = \"build\"\nargs = { target = \"x\" }\n",
    );
    assert!(
        e.contains("b-flows.toml:2:1: workflow name \"build\" is already a tool's name (defined at a-tools.toml:4)"),
        "{e}"
    );
}

#[test]
fn steps_are_required_and_limited() {
    let e = errors("[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n");
    assert!(e.contains("is missing its steps"), "{e}");
    let many: String =
        (0..33).map(|_| "[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"x\" }\n").collect();
    let e = errors(&format!("[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n{many}"));
    assert!(e.contains("has 33 steps; a workflow has at most 32"), "{e}");
}

#[test]
fn unknown_keys_of_a_workflow_and_a_step_are_errors() {
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\ncommand = []\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"x\" }\ncontinue_on_eror = true\n",
    );
    assert!(e.contains("unknown key \"command\" in [workflows.w]"), "{e}");
    assert!(
        e.contains("unknown key \"continue_on_eror\" in [workflows.w] step 1; did you mean \"continue_on_error\""),
        "{e}"
    );
}

#[test]
fn a_secret_workflow_param_can_only_fill_a_secret_step_param() {
    // The step's audit records show its argv with only the step tool's secret params redacted:
    // a secret workflow param passed to a plain one would be written out in the clear.
    let e = errors(
        "[workflows.w]\ndescription = \"d\"\nreason = \"r\"\n[workflows.w.params.t]\ntype = \"string\"\nrequired = true\nsecret = true\n[[workflows.w.steps]]\ntool = \"build\"\nargs = { target = \"{{t}}\" }\n",
    );
    assert!(e.contains("workflow param \"t\" is secret, but param \"target\" of tool \"build\" is not"), "{e}");
}

#[test]
fn a_step_takes_a_typed_field_of_an_earlier_steps_json_result() {
    let ok = r#"
[workflows.release]
description = "d"
reason = "r"
[[workflows.release.steps]]
tool = "version"
[[workflows.release.steps]]
tool = "build"
args = { target = "{{steps.1.version}}", jobs = "{{ steps.1.build }}" }
"#;
    let set = load(ok).unwrap_or_else(|e| panic!("{e}"));
    let args = &set.workflows[0].steps[1].args;
    assert_eq!(args["target"], StepArg::Output { step: 1, field: "version".into() });
    assert_eq!(args["jobs"], StepArg::Output { step: 1, field: "build".into() });

    let later = errors(&ok.replace("{{steps.1.version}}", "{{steps.2.version}}"));
    assert!(
        later.contains("step 2 does not run before it; a step can take fields of the results of steps 1 to 1"),
        "{later}"
    );
    let malformed = errors(&ok.replace("{{steps.1.version}}", "{{steps.one}}"));
    assert!(malformed.contains("write {{steps.N.FIELD}}"), "{malformed}");
    let unknown = errors(&ok.replace("{{steps.1.version}}", "{{steps.1.name}}"));
    assert!(unknown.contains("declares no such top-level property (it declares: build, version)"), "{unknown}");
    let mistyped = errors(&ok.replace("{{ steps.1.build }}", "{{steps.1.version}}"));
    assert!(mistyped.contains("type \"string\", which does not fit a param of type integer"), "{mistyped}");
    let text_tool = errors(
        r#"
[workflows.release]
description = "d"
reason = "r"
[[workflows.release.steps]]
tool = "build"
args = { target = "x" }
[[workflows.release.steps]]
tool = "build"
args = { target = "{{steps.1.version}}" }
"#,
    );
    assert!(text_tool.contains("that tool has no JSON result with an output schema"), "{text_tool}");
    assert!(text_tool.contains("b-flows.toml:"), "reported at the step: {text_tool}");
}
