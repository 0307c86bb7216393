// A password for `user create` that never appears on a command line (shell history, the
// process list): piped on stdin, its first line; at a terminal, typed twice at a prompt that
// does not echo it.
const MAX_PIPED_BYTES = 4_096;

/** The password piped on stdin (its first line, without the newline), or asked for at the terminal. */
export async function readPassword(input: NodeJS.ReadStream = process.stdin, output: NodeJS.WriteStream = process.stderr): Promise<string> {
  if (!input.isTTY) return readPiped(input);
  const password = await prompt(input, output, 'Password: ');
  const again = await prompt(input, output, 'Repeat the password: ');
  if (password !== again) throw new PasswordInputError('the two passwords differ');
  return password;
}

export class PasswordInputError extends Error {
  readonly code = 'PASSWORD_INPUT';
}

async function readPiped(input: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  for await (const chunk of input) {
    text += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (text.length > MAX_PIPED_BYTES) throw new PasswordInputError(`the password on stdin is over ${MAX_PIPED_BYTES} characters`);
    if (text.includes('\n')) break;
  }
  return text.split(/\r?\n/)[0] ?? '';
}

/** One line typed in raw mode, echoing nothing; Ctrl-C aborts, Backspace deletes. */
function prompt(input: NodeJS.ReadStream, output: NodeJS.WriteStream, question: string): Promise<string> {
  output.write(question);
  return new Promise((resolve, reject) => {
    let typed = '';
    const finish = (error?: Error) => {
      input.off('data', onData);
      input.setRawMode(false);
      input.pause();
      output.write('\n');
      if (error) reject(error);
      else resolve(typed);
    };
    const onData = (chunk: Buffer) => {
      for (const character of chunk.toString('utf8')) {
        if (character === '\r' || character === '\n' || character === '\u0004') {
          finish();
          return;
        }
        if (character === '\u0003') {
          finish(new PasswordInputError('cancelled'));
          return;
        }
        if (character === '\u007f' || character === '\b') typed = typed.slice(0, -1);
        else if (character >= ' ') typed += character;
      }
    };
    input.setRawMode(true);
    input.resume();
    input.on('data', onData);
  });
}
