// The request body's schema, from any validation library: a Standard Schema
// (https://standardschema.dev: zod 3.24+, valibot, arktype...) or an object with zod's
// safeParse. The Standard Schema interface is types only, copied here as its spec intends,
// so the package needs no validation library at run time.

/** The Standard Schema v1 interface (the parts this package reads). */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** What a Standard Schema's `validate` returns: the value, or the issues. */
export type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined }> };

/** zod's (and others') safeParse. */
export interface SafeParser<Output> {
  safeParse: (value: unknown) => { success: true; data: Output } | { success: false; error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> } };
}

export type Validator<Output> = StandardSchemaV1<unknown, Output> | SafeParser<Output>;

export type Validated<Output> = { ok: true; value: Output } | { ok: false; issues: { path: string; message: string }[] };

const segment = (part: PropertyKey | { readonly key: PropertyKey }): string => String(typeof part === 'object' ? part.key : part);

export async function validate<Output>(validator: Validator<Output>, value: unknown): Promise<Validated<Output>> {
  if ('~standard' in validator) {
    const result = await validator['~standard'].validate(value);
    if (result.issues === undefined) return { ok: true, value: result.value };
    return { ok: false, issues: result.issues.map((issue) => ({ path: (issue.path ?? []).map(segment).join('.'), message: issue.message })) };
  }
  const result = validator.safeParse(value);
  if (result.success) return { ok: true, value: result.data };
  return { ok: false, issues: result.error.issues.map((issue) => ({ path: issue.path.map(segment).join('.'), message: issue.message })) };
}
