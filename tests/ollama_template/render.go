// Render an Ollama TEMPLATE with Go's text/template, the engine Ollama itself executes templates with.
//
//	go run render.go < request.json
//
// The request is {"template": text, "messages": [...], "tools": [...], "prompt": p}, messages and tools
// in the shape of Ollama's /api/chat. The template sees what Ollama's template/template.go gives it: its
// `json` function, missing keys as zero values, .System (the system messages joined by a blank line),
// .Messages (each with .Role, .Content, .Thinking, .ToolCalls with .Function.Name and .Function.Arguments
// as a map, .ToolName), .Tools (each .Type and .Function with .Name, .Description and .Parameters: .Type,
// .Required and .Properties, a map of properties with .Type, .Description and .Enum) and .Prompt.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/template"
)

type ToolCallFunction struct {
	Index     int            `json:"index"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

type ToolCall struct {
	ID       string           `json:"id"`
	Function ToolCallFunction `json:"function"`
}

type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Thinking   string     `json:"thinking"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolName   string     `json:"tool_name"`
	ToolCallID string     `json:"tool_call_id"`
}

// PropertyType is a JSON Schema type: one name or a list of them, as Ollama's api.PropertyType reads it.
type PropertyType []string

func (pt *PropertyType) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*pt = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return err
	}
	*pt = many
	return nil
}

func (pt PropertyType) MarshalJSON() ([]byte, error) {
	if len(pt) == 1 {
		return json.Marshal(pt[0])
	}
	return json.Marshal([]string(pt))
}

type ToolProperty struct {
	Type        PropertyType `json:"type,omitempty"`
	Description string       `json:"description,omitempty"`
	Enum        []any        `json:"enum,omitempty"`
}

type ToolFunctionParameters struct {
	Type       string                  `json:"type"`
	Required   []string                `json:"required,omitempty"`
	Properties map[string]ToolProperty `json:"properties"`
}

type ToolFunction struct {
	Name        string                 `json:"name"`
	Description string                 `json:"description"`
	Parameters  ToolFunctionParameters `json:"parameters"`
}

type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

type Request struct {
	Template string    `json:"template"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools"`
	Prompt   string    `json:"prompt"`
}

var funcs = template.FuncMap{
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
}

func main() {
	var request Request
	if err := json.NewDecoder(os.Stdin).Decode(&request); err != nil {
		fmt.Fprintln(os.Stderr, "bad request:", err)
		os.Exit(2)
	}
	tmpl, err := template.New("modelfile").Option("missingkey=zero").Funcs(funcs).Parse(request.Template)
	if err != nil {
		fmt.Fprintln(os.Stderr, "template does not parse:", err)
		os.Exit(1)
	}
	var system []string
	for _, m := range request.Messages {
		if m.Role == "system" {
			system = append(system, m.Content)
		}
	}
	data := map[string]any{"System": strings.Join(system, "\n\n"), "Messages": request.Messages,
		"Tools": request.Tools, "Prompt": request.Prompt, "Response": ""}
	if err := tmpl.Execute(os.Stdout, data); err != nil {
		fmt.Fprintln(os.Stderr, "template does not run:", err)
		os.Exit(1)
	}
}
