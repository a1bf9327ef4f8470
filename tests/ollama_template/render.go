// Render an Ollama TEMPLATE with Go's text/template, the engine Ollama itself executes templates with.
//
//	go run render.go < request.json
//
// The request is {"template": text, "messages": [{"role": r, "content": c}, ...], "prompt": p}; the
// template sees what Ollama gives it: .Messages (each with .Role and .Content) and .Prompt.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/template"
)

type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type Request struct {
	Template string    `json:"template"`
	Messages []Message `json:"messages"`
	Prompt   string    `json:"prompt"`
}

func main() {
	var request Request
	if err := json.NewDecoder(os.Stdin).Decode(&request); err != nil {
		fmt.Fprintln(os.Stderr, "bad request:", err)
		os.Exit(2)
	}
	tmpl, err := template.New("modelfile").Parse(request.Template)
	if err != nil {
		fmt.Fprintln(os.Stderr, "template does not parse:", err)
		os.Exit(1)
	}
	data := map[string]any{"Messages": request.Messages, "Prompt": request.Prompt}
	if err := tmpl.Execute(os.Stdout, data); err != nil {
		fmt.Fprintln(os.Stderr, "template does not run:", err)
		os.Exit(1)
	}
}
