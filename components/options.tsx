// The <option>s of a <select>: one per value, labelled by `label` (the value itself by default).
export function Options<T extends string>({ values, label = (value) => value }: { values: readonly T[]; label?: (value: T) => string }) {
  return values.map((value) => (
    <option key={value} value={value}>
      {label(value)}
    </option>
  ));
}
