package cli

// MainContext lets the external tests end a long-running command by
// cancelling its context, as Ctrl-C does.
var MainContext = mainContext
