#compdef jobagentctl

_jobagentctl_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _JOBAGENTCTL_COMPLETE=complete_zsh jobagentctl)
}

compdef _jobagentctl_completion jobagentctl
